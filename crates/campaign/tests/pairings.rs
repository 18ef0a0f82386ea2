//! `[hosts.pairings]` and the `pairing` axis: node sets as values of one
//! campaign (S4's four OS pairings), checked and expanded before anything
//! runs, and grown with `--resume` by adding a pairing.

use std::collections::HashSet;
use wirebench_campaign::campaign::{check_growth, Campaign, Target};

/// Four nodes, two pairings sharing the receiver; `extra` goes after the
/// pairings, `matrix` is the matrix block.
fn file(pairings: &str, matrix: &str) -> String {
    format!(
        "name = \"p\"\npackets = 10\n\
         [hosts]\n\
         [[hosts.node]]\nname = \"lin1\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"win1\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"lin2\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n\
         [[hosts.node]]\nname = \"win2\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.2\"\n\
         [[hosts.node]]\nname = \"r1\"\nlocal = true\nrole = \"router\"\n\
         [hosts.pairings]\n{pairings}\
         [matrix]\n{matrix}"
    )
}

const TWO: &str = "lin-lin = { sender = \"lin1\", receiver = \"lin2\", routers = [\"r1\"] }\n\
                   win-lin = { sender = \"win1\", receiver = \"lin2\" }\n";

fn err(text: &str) -> String {
    Campaign::parse(text, "c.toml")
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn pairings_expand_to_scenarios_carrying_their_node_sets() {
    let c = Campaign::parse(
        &file(TWO, "ip = [4]\npairing = [\"win-lin\", \"lin-lin\"]\n"),
        "c.toml",
    )
    .unwrap();
    let s = c.expand();
    let keys: Vec<&str> = s.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["ip=4,pairing=win-lin", "ip=4,pairing=lin-lin"]);
    assert_eq!(s[0].settings.pairing.as_deref(), Some("win-lin"));
    assert_eq!(s[0].axes["pairing"], "win-lin");
    let Target::Hosts(h) = &c.target else {
        panic!("hosts target")
    };
    let ll = &h.pairings["lin-lin"];
    assert_eq!(ll.senders, ["lin1"]);
    assert_eq!(ll.receiver, "lin2");
    assert_eq!(ll.routers, ["r1"]);
    assert!(ll.uses("r1") && !ll.uses("win1") && !ll.uses("win2"));
    assert!(!h.pairings["win-lin"].uses("r1"));
    // Senders without `to` and two receivers: the pairings name them.
    assert!(h
        .nodes
        .iter()
        .all(|n| n.to.is_none() || n.role.as_str() != "sender"));
    // Several senders in one pairing.
    let c = Campaign::parse(
        &file(
            "both = { sender = [\"lin1\", \"win1\"], receiver = \"win2\" }\n",
            "pairing = \"both\"\n",
        ),
        "c.toml",
    )
    .unwrap();
    let Target::Hosts(h) = &c.target else {
        panic!("hosts target")
    };
    assert_eq!(h.pairings["both"].senders, ["lin1", "win1"]);
}

#[test]
fn bad_pairings_are_refused_naming_line_and_key() {
    // Line numbers: the [hosts.pairings] entries start on line 27.
    let m = "pairing = [\"lin-lin\"]\n";
    let e = err(&file(
        "lin-lin = { sender = \"mac1\", receiver = \"lin2\" }\n",
        m,
    ));
    assert!(
        e.starts_with("c.toml:27: `pairings.lin-lin.sender`: no node named \"mac1\""),
        "{e}"
    );
    let e = err(&file(
        "lin-lin = { sender = \"lin1\", receiver = \"lin1\" }\n",
        m,
    ));
    assert!(
        e.starts_with(
            "c.toml:27: `pairings.lin-lin.receiver`: node \"lin1\" is a sender, not a receiver"
        ),
        "{e}"
    );
    let e = err(&file(
        "lin-lin = { sender = \"lin1\", receiver = \"lin2\", routers = [\"lin2\"] }\n",
        m,
    ));
    assert!(e.contains("`pairings.lin-lin.routers`"), "{e}");
    let e = err(&file(
        "lin-lin = { sender = \"lin1\", recv = \"lin2\" }\n",
        m,
    ));
    assert!(e.starts_with("c.toml:27:") && e.contains("recv"), "{e}");
    // The matrix names a pairing that is not defined (line 28).
    let e = err(&file(TWO, "pairing = [\"lin-lin\", \"mac-lin\"]\n"));
    assert!(
        e.starts_with("c.toml:30: `pairing`: no pairing named \"mac-lin\" in [hosts.pairings] (pairings: lin-lin, win-lin)"),
        "{e}"
    );
    // Pairing and sender axes together.
    let e = err(&file(TWO, "pairing = [\"lin-lin\"]\nsender = [\"lin1\"]\n"));
    assert!(
        e.starts_with("c.toml:31: `sender`: give either `sender` or `pairing`"),
        "{e}"
    );
    // Pairings given but a block without the axis: whose receiver?
    let e = err(&file(TWO, "ip = [4]\n"));
    assert!(
        e.contains(
            "`pairing`: [hosts.pairings] is given: every matrix block needs a `pairing` axis"
        ),
        "{e}"
    );
    // The axis without pairings.
    let e = err("name = \"p\"\npackets = 10\n[loopback]\n[matrix]\npairing = [\"a\"]\n");
    assert!(
        e.starts_with("c.toml:5: `pairing`: the pairing axis picks among [hosts.pairings]"),
        "{e}"
    );
    let e = err(&file(TWO, "pairing = [\"a,b\"]\n"));
    assert!(e.starts_with("c.toml:30: `pairing`:"), "{e}");
}

#[test]
fn adding_a_pairing_grows_the_campaign_changing_a_used_one_is_refused() {
    let old = Campaign::parse(&file(TWO, "pairing = [\"lin-lin\"]\n"), "c.toml").unwrap();
    let done: HashSet<(String, u32)> = [("pairing=lin-lin".to_string(), 0)].into();
    let grown = Campaign::parse(
        &file(TWO, "pairing = [\"lin-lin\", \"win-lin\"]\n"),
        "c.toml",
    )
    .unwrap();
    let g = check_growth(&old, &grown, &done).unwrap();
    assert_eq!(g, ["1 new scenario(s)"]);
    // A pairing the finished runs used now names another receiver.
    let moved = "lin-lin = { sender = \"lin1\", receiver = \"win2\", routers = [\"r1\"] }\n\
                 win-lin = { sender = \"win1\", receiver = \"lin2\" }\n";
    let changed = Campaign::parse(
        &file(moved, "pairing = [\"lin-lin\", \"win-lin\"]\n"),
        "c.toml",
    )
    .unwrap();
    let e = check_growth(&old, &changed, &done).unwrap_err();
    assert!(e.contains("[hosts.pairings] lin-lin changed"), "{e}");
    // A node of a used pairing changed.
    let text = file(TWO, "pairing = [\"lin-lin\"]\n").replace("127.0.0.1", "127.0.0.3");
    let e = check_growth(&old, &Campaign::parse(&text, "c.toml").unwrap(), &done).unwrap_err();
    assert!(e.contains("`[[hosts.node]]` lin2 changed"), "{e}");
    // A node no finished run used may change (win2 is in no used pairing).
    let text = file(TWO, "pairing = [\"lin-lin\"]\n").replace("127.0.0.2", "127.0.0.4");
    check_growth(&old, &Campaign::parse(&text, "c.toml").unwrap(), &done).unwrap();
}
