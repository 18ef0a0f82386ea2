//! Turns a validated topology into the exact list of names, addresses and
//! routes to create, without touching the kernel. Everything the test-bed
//! does later (build, status, expected path MTU, teardown) reads this plan,
//! which is also what the state file stores.
//!
//! Addressing: links are grouped into L2 segments (a point-to-point link is
//! one segment; every link touching a switch joins that switch's segment).
//! Segment `k` (1-based, in link order) gets `10.0.k.0/24` and
//! `fd00:0:0:k::/64` (k in hex there, as IPv6 is written); its members are numbered 1, 2, … in link order.

use crate::error::TestbedError;
use crate::spec::{NodeKind, TopologySpec, IPV6_MIN_MTU};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Namespace prefix of every test-bed: `wb-<name>-`.
pub fn ns_prefix(testbed: &str) -> String {
    format!("wb-{testbed}-")
}

/// Name of the bridge inside a switch's namespace.
pub const BRIDGE: &str = "br0";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// One interface of a node, as the test-bed sets it up.
pub struct IfacePlan {
    /// Interface name inside the node's namespace (`eth0`, `eth1`, …).
    pub name: String,
    /// Index of the link in the spec.
    pub link: usize,
    /// Index of its segment (the link's subnet, or a switch's bridge domain).
    pub segment: usize,
    /// Node at the other end of the link.
    pub peer_node: String,
    /// Interface at the other end.
    pub peer_iface: String,
    /// Link MTU.
    pub mtu: u32,
    /// Link rate in bit/s; None: unshaped.
    pub rate_bps: Option<u64>,
    /// Segmentation and receive offloads on.
    pub offloads: bool,
    /// None on switch ports (they bridge) .
    pub v4: Option<Ipv4Addr>,
    /// None on switch ports and on links below 1280 B (no IPv6 there).
    pub v6: Option<Ipv6Addr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// One static route of a node.
pub struct RoutePlan {
    /// `10.0.3.0/24` or `fd00:0:0:3::/64`.
    pub dest: String,
    /// Next hop.
    pub via: IpAddr,
    /// Interface towards the next hop.
    pub dev: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// One node: its namespace, interfaces and routes.
pub struct NodePlan {
    /// Node name.
    pub name: String,
    /// Host, router or switch.
    pub kind: NodeKind,
    /// Its network namespace.
    pub netns: String,
    /// Its interfaces.
    pub ifaces: Vec<IfacePlan>,
    /// Its static routes.
    pub routes: Vec<RoutePlan>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// One IP subnet: a link, or the links of a switch.
pub struct SegmentPlan {
    /// Segment number (the third octet of its IPv4 subnet).
    pub id: usize,
    /// IPv4 subnet, e.g. `10.0.3.0/24`.
    pub v4_net: String,
    /// IPv6 subnet; None when a link below 1280 B is in it.
    pub v6_net: Option<String>,
    /// Smallest MTU of its links.
    pub mtu: u32,
    /// Indices of its links in the spec.
    pub links: Vec<usize>,
    /// Members that have addresses: (node, interface).
    pub members: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// Everything a test-bed is made of, computed from its spec before anything is created.
pub struct Plan {
    /// Test-bed name.
    pub testbed: String,
    /// Its nodes.
    pub nodes: Vec<NodePlan>,
    /// Its segments.
    pub segments: Vec<SegmentPlan>,
}

fn v4_of(seg: usize, host: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, seg as u8, host as u8)
}

fn v6_of(seg: usize, host: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0, 0, seg as u16, 0, 0, 0, host as u16)
}

impl Plan {
    /// Computes the plan (validating the spec first).
    pub fn new(testbed: &str, spec: &TopologySpec) -> Result<Plan, TestbedError> {
        spec.validate()?;
        let n_links = spec.links.len();
        // Union-find over links: links sharing a switch are one segment.
        let mut parent: Vec<usize> = (0..n_links).collect();
        fn find(p: &mut [usize], x: usize) -> usize {
            let mut r = x;
            while p[r] != r {
                r = p[r];
            }
            let mut y = x;
            while p[y] != r {
                let nxt = p[y];
                p[y] = r;
                y = nxt;
            }
            r
        }
        let mut first_link_of_switch: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, l) in spec.links.iter().enumerate() {
            for e in &l.endpoints {
                if spec.kind(e) == Some(NodeKind::Switch) {
                    match first_link_of_switch.get(e.as_str()) {
                        Some(&j) => {
                            let (a, b) = (find(&mut parent, i), find(&mut parent, j));
                            parent[a] = b;
                        }
                        None => {
                            first_link_of_switch.insert(e.as_str(), i);
                        }
                    }
                }
            }
        }
        let mut seg_of_root: BTreeMap<usize, usize> = BTreeMap::new();
        let mut seg_of_link = vec![0usize; n_links];
        for (i, s) in seg_of_link.iter_mut().enumerate() {
            let r = find(&mut parent, i);
            let next = seg_of_root.len() + 1;
            *s = *seg_of_root.entry(r).or_insert(next);
        }
        let n_segs = seg_of_root.len();
        if n_segs > 250 {
            return Err(TestbedError::Invalid(
                "more than 250 L2 segments; the addressing plan has room for 250".into(),
            ));
        }
        let mut segments: Vec<SegmentPlan> = (1..=n_segs)
            .map(|id| SegmentPlan {
                id,
                v4_net: format!("10.0.{id}.0/24"),
                v6_net: None,
                mtu: 0,
                links: Vec::new(),
                members: Vec::new(),
            })
            .collect();
        for (i, l) in spec.links.iter().enumerate() {
            let s = &mut segments[seg_of_link[i] - 1];
            if s.mtu != 0 && s.mtu != l.mtu {
                return Err(TestbedError::Invalid(format!(
                    "link {}: MTU {} differs from MTU {} of the other links on the same switch; a bridged segment has one MTU",
                    l.label(),
                    l.mtu,
                    s.mtu
                )));
            }
            s.mtu = l.mtu;
            s.links.push(i);
        }
        for s in &mut segments {
            if s.mtu >= IPV6_MIN_MTU {
                s.v6_net = Some(format!("fd00:0:0:{:x}::/64", s.id));
            }
        }

        let mut nodes: Vec<NodePlan> = spec
            .nodes
            .iter()
            .map(|n| NodePlan {
                name: n.name.clone(),
                kind: n.kind,
                netns: format!("{}{}", ns_prefix(testbed), n.name),
                ifaces: Vec::new(),
                routes: Vec::new(),
            })
            .collect();
        let idx: BTreeMap<String, usize> = spec
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let mut next_host = vec![1usize; n_segs + 1];
        for (li, l) in spec.links.iter().enumerate() {
            let seg = seg_of_link[li];
            let mut names = [String::new(), String::new()];
            for (k, e) in l.endpoints.iter().enumerate() {
                let ni = idx[e];
                names[k] = format!("eth{}", nodes[ni].ifaces.len());
                let (v4, v6) = if nodes[ni].kind == NodeKind::Switch {
                    (None, None)
                } else {
                    let h = next_host[seg];
                    if h > 250 {
                        return Err(TestbedError::Invalid(format!(
                            "segment of link {} has more than 250 members",
                            l.label()
                        )));
                    }
                    next_host[seg] += 1;
                    segments[seg - 1]
                        .members
                        .push((e.clone(), names[k].clone()));
                    let v6 = segments[seg - 1].v6_net.as_ref().map(|_| v6_of(seg, h));
                    (Some(v4_of(seg, h)), v6)
                };
                nodes[ni].ifaces.push(IfacePlan {
                    name: names[k].clone(),
                    link: li,
                    segment: seg,
                    peer_node: String::new(),
                    peer_iface: String::new(),
                    mtu: l.mtu,
                    rate_bps: l.rate_bps,
                    offloads: l.offloads,
                    v4,
                    v6,
                });
            }
            for k in 0..2 {
                let ni = idx[&l.endpoints[k]];
                let f = nodes[ni].ifaces.last_mut().expect("just pushed");
                f.peer_node = l.endpoints[1 - k].clone();
                f.peer_iface = names[1 - k].clone();
            }
        }
        let mut plan = Plan {
            testbed: testbed.to_string(),
            nodes,
            segments,
        };
        for v6 in [false, true] {
            plan.compute_routes(v6);
        }
        Ok(plan)
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodePlan> {
        self.nodes.iter().find(|n| n.name == name)
    }

    fn addr_on(&self, node: &str, seg: usize, v6: bool) -> Option<(IpAddr, String)> {
        let n = self.node(node)?;
        let f = n.ifaces.iter().find(|f| f.segment == seg)?;
        let a = if v6 {
            IpAddr::V6(f.v6?)
        } else {
            IpAddr::V4(f.v4?)
        };
        Some((a, f.name.clone()))
    }

    /// L3 neighbours of a node: (neighbour, segment), over segments that
    /// carry the family.
    fn neighbours(&self, node: &str, v6: bool) -> Vec<(String, usize)> {
        let Some(n) = self.node(node) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for f in &n.ifaces {
            let seg = &self.segments[f.segment - 1];
            if v6 && seg.v6_net.is_none() {
                continue;
            }
            for (m, _) in &seg.members {
                if m != node && !out.contains(&(m.clone(), f.segment)) {
                    out.push((m.clone(), f.segment));
                }
            }
        }
        out
    }

    /// BFS from `src` through routers only: for each reached node, the hop
    /// count and the first hop (neighbour, segment).
    fn bfs(&self, src: &str, v6: bool) -> BTreeMap<String, (usize, (String, usize))> {
        let mut reached: BTreeMap<String, (usize, (String, usize))> = BTreeMap::new();
        let mut q = VecDeque::new();
        q.push_back((src.to_string(), 0usize, None::<(String, usize)>));
        let mut seen = vec![src.to_string()];
        while let Some((x, d, first)) = q.pop_front() {
            for (y, seg) in self.neighbours(&x, v6) {
                if seen.contains(&y) {
                    continue;
                }
                seen.push(y.clone());
                let fh = first.clone().unwrap_or((y.clone(), seg));
                reached.insert(y.clone(), (d + 1, fh.clone()));
                if self.node(&y).map(|n| n.kind) == Some(NodeKind::Router) {
                    q.push_back((y, d + 1, Some(fh)));
                }
            }
        }
        reached
    }

    fn compute_routes(&mut self, v6: bool) {
        let mut all: Vec<(usize, RoutePlan)> = Vec::new();
        for (ni, n) in self.nodes.iter().enumerate() {
            if n.kind == NodeKind::Switch {
                continue;
            }
            let reached = self.bfs(&n.name, v6);
            let attached: Vec<usize> = n.ifaces.iter().map(|f| f.segment).collect();
            for seg in &self.segments {
                if attached.contains(&seg.id) {
                    continue;
                }
                let net = if v6 {
                    match &seg.v6_net {
                        Some(x) => x.clone(),
                        None => continue,
                    }
                } else {
                    seg.v4_net.clone()
                };
                // The nearest router on that segment.
                let best = seg
                    .members
                    .iter()
                    .filter(|(m, _)| self.node(m).map(|x| x.kind) == Some(NodeKind::Router))
                    .filter_map(|(m, _)| reached.get(m))
                    .min_by_key(|(d, _)| *d);
                if let Some((_, (hop, hop_seg))) = best {
                    if let Some((via, _)) = self.addr_on(hop, *hop_seg, v6) {
                        let dev = n
                            .ifaces
                            .iter()
                            .find(|f| f.segment == *hop_seg)
                            .map(|f| f.name.clone())
                            .unwrap_or_default();
                        all.push((
                            ni,
                            RoutePlan {
                                dest: net,
                                via,
                                dev,
                            },
                        ));
                    }
                }
            }
        }
        for (ni, r) in all {
            self.nodes[ni].routes.push(r);
        }
    }

    /// The node's address toward the rest: its first addressed interface.
    pub fn addr(&self, node: &str, v6: bool) -> Option<IpAddr> {
        let n = self.node(node)?;
        n.ifaces.iter().find_map(|f| {
            if v6 {
                f.v6.map(IpAddr::V6)
            } else {
                f.v4.map(IpAddr::V4)
            }
        })
    }

    /// The path MTU the plan implies from `from` to `to`'s address: the
    /// smallest segment MTU along the routed path. None when unreachable.
    pub fn expected_path_mtu(&self, from: &str, to: &str, v6: bool) -> Option<u32> {
        let dst = self.addr(to, v6)?;
        let dst_seg = self
            .node(to)?
            .ifaces
            .iter()
            .find(|f| {
                (if v6 {
                    f.v6.map(IpAddr::V6)
                } else {
                    f.v4.map(IpAddr::V4)
                }) == Some(dst)
            })?
            .segment;
        let mut x = from.to_string();
        let mut mtu = u32::MAX;
        for _ in 0..=self.nodes.len() {
            let n = self.node(&x)?;
            if n.ifaces.iter().any(|f| f.segment == dst_seg) {
                return Some(mtu.min(self.segments[dst_seg - 1].mtu));
            }
            let net = if v6 {
                self.segments[dst_seg - 1].v6_net.clone()?
            } else {
                self.segments[dst_seg - 1].v4_net.clone()
            };
            let r = n.routes.iter().find(|r| r.dest == net)?;
            let f = n.ifaces.iter().find(|f| f.name == r.dev)?;
            mtu = mtu.min(self.segments[f.segment - 1].mtu);
            // Which node owns the next hop?
            x = self
                .nodes
                .iter()
                .find(|m| {
                    m.ifaces.iter().any(|g| {
                        g.v4.map(IpAddr::V4) == Some(r.via) || g.v6.map(IpAddr::V6) == Some(r.via)
                    })
                })?
                .name
                .clone();
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{parse_topology, preset, LinkOpts};
    use std::path::Path;

    #[test]
    fn router_plan() {
        let s = preset("two-routers", &LinkOpts::default()).unwrap();
        let p = Plan::new("t", &s).unwrap();
        let a = p.node("a").unwrap();
        assert_eq!(a.netns, "wb-t-a");
        assert_eq!(a.ifaces[0].v4, Some(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!(p.addr("b", false).unwrap().to_string(), "10.0.3.2");
        assert_eq!(p.addr("b", true).unwrap().to_string(), "fd00:0:0:3::2");
        // a routes 10.0.2/24 and 10.0.3/24 via r1 (10.0.1.2), both families.
        assert_eq!(a.routes.len(), 4);
        assert!(a
            .routes
            .iter()
            .any(|r| r.dest == "10.0.3.0/24" && r.via.to_string() == "10.0.1.2"));
        let r2 = p.node("r2").unwrap();
        assert!(r2
            .routes
            .iter()
            .any(|r| r.dest == "fd00:0:0:1::/64" && r.via.to_string() == "fd00:0:0:2::1"));
        assert_eq!(p.expected_path_mtu("a", "b", false), Some(1500));
    }

    #[test]
    fn every_address_is_inside_its_segment() {
        let spec = TopologySpec::chain(20);
        let p = Plan::new("t", &spec).unwrap();
        for n in &p.nodes {
            for f in &n.ifaces {
                let seg = &p.segments[f.segment - 1];
                let v6net: Ipv6Addr = seg
                    .v6_net
                    .as_ref()
                    .unwrap()
                    .trim_end_matches("/64")
                    .parse()
                    .unwrap();
                let a = f.v6.unwrap().segments();
                assert_eq!(&a[..4], &v6net.segments()[..4], "{} {}", n.name, f.name);
                let v4net: Ipv4Addr = seg.v4_net.trim_end_matches("/24").parse().unwrap();
                assert_eq!(&f.v4.unwrap().octets()[..3], &v4net.octets()[..3]);
            }
            for r in &n.routes {
                let net = r.dest.split('/').next().unwrap();
                let net: IpAddr = net.parse().unwrap();
                assert_eq!(net.is_ipv6(), r.via.is_ipv6());
            }
        }
        assert_eq!(p.segments[15].v6_net.as_deref(), Some("fd00:0:0:10::/64"));
        assert_eq!(p.expected_path_mtu("a", "b", true), Some(1500));
    }

    #[test]
    fn switch_and_small_mtu() {
        let t = r#"
[[node]]
name = "a"
kind = "host"
[[node]]
name = "b"
kind = "host"
[[node]]
name = "sw"
kind = "switch"
[[node]]
name = "r"
kind = "router"
[[node]]
name = "c"
kind = "host"
[[link]]
endpoints = ["a", "sw"]
[[link]]
endpoints = ["b", "sw"]
[[link]]
endpoints = ["r", "sw"]
[[link]]
endpoints = ["r", "c"]
mtu = 1000
"#;
        let s = parse_topology(t, Path::new("x"), &LinkOpts::default()).unwrap();
        let p = Plan::new("t", &s).unwrap();
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.segments[0].members.len(), 3);
        assert_eq!(p.addr("r", false).unwrap().to_string(), "10.0.1.3");
        assert!(p.addr("c", true).is_none());
        assert_eq!(p.expected_path_mtu("a", "c", false), Some(1000));
        assert_eq!(p.expected_path_mtu("a", "b", false), Some(1500));
        assert_eq!(p.expected_path_mtu("a", "c", true), None);
        let sw = p.node("sw").unwrap();
        assert!(sw.routes.is_empty() && sw.ifaces.iter().all(|f| f.v4.is_none()));
        // mixed MTU on a switch is refused
        let bad = t.replacen(
            "endpoints = [\"b\", \"sw\"]",
            "endpoints = [\"b\", \"sw\"]\nmtu = 9000",
            1,
        );
        assert!(parse_topology(&bad, Path::new("x"), &LinkOpts::default()).is_err());
    }
}
