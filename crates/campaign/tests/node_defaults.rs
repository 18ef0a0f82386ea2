//! `[hosts.defaults]`: `agent`, `ssh_options` and `apply_*` given once for
//! every `[[hosts.node]]`; a node's own value wins.

use wirebench_campaign::campaign::{Campaign, NodeReach, Target};

#[test]
fn defaults_fill_every_node_and_a_nodes_own_value_wins() {
    let text = "name = \"d\"\npackets = 10\n\
        [hosts]\n[hosts.defaults]\nagent = \"/opt/wb/wirebench\"\nssh_options = [\"-i\", \"/k\"]\napply_mtu = true\napply_offloads = true\n\
        [[hosts.node]]\nname = \"s\"\nssh = \"root@10.9.0.1\"\nrole = \"sender\"\n\
        [[hosts.node]]\nname = \"r\"\nssh = \"root@10.9.0.2\"\nrole = \"receiver\"\nipv4 = \"10.9.1.2\"\n\
        agent = \"/usr/bin/wirebench\"\nssh_options = [\"-p\", \"2222\"]\napply_mtu = false\n\
        [matrix]\nmtu = [1500, 9000]\n";
    let c = Campaign::parse(text, "c.toml").unwrap();
    let Target::Hosts(h) = &c.target else {
        panic!("hosts target")
    };
    let (s, r) = (&h.nodes[0], &h.nodes[1]);
    assert_eq!(s.agent.as_deref(), Some("/opt/wb/wirebench"));
    assert_eq!(r.agent.as_deref(), Some("/usr/bin/wirebench"));
    let opts = |n: &wirebench_campaign::campaign::HostNode| match &n.reach {
        NodeReach::Ssh { options, .. } => options.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(opts(s), ["-i", "/k"]);
    assert_eq!(opts(r), ["-p", "2222"]);
    assert!(s.apply_mtu && s.apply_offloads && !s.apply_link_rate);
    assert!(!r.apply_mtu && r.apply_offloads);
    // Without defaults nothing is applied.
    let plain = text.replace("apply_mtu = true\napply_offloads = true\n", "");
    let e = Campaign::parse(&plain, "c.toml").unwrap_err().to_string();
    assert!(e.contains("`mtu`: link settings can only be varied"), "{e}");
    let plain = plain.replace("mtu = [1500, 9000]", "ip = 4");
    let c = Campaign::parse(&plain, "c.toml").unwrap();
    let Target::Hosts(h) = &c.target else {
        panic!("hosts target")
    };
    assert!(h.nodes.iter().all(|n| !n.apply_offloads && !n.apply_mtu));
}

#[test]
fn bad_defaults_are_refused_naming_line_and_key() {
    let e = Campaign::parse(
        "name = \"d\"\npackets = 10\n[hosts]\n[hosts.defaults]\nrole = \"sender\"\n[[hosts.node]]\nname = \"s\"\nlocal = true\nrole = \"sender\"\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("c.toml:5: `role`: unknown key"), "{e}");
    let e = Campaign::parse(
        "name = \"d\"\npackets = 10\n[hosts]\nreceiver = \"127.0.0.1\"\n[hosts.defaults]\napply_mtu = true\n[matrix]\nip = 4\n",
        "c.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`defaults`: [hosts.defaults] sets [[hosts.node]] settings"),
        "{e}"
    );
}
