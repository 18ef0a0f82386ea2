#![cfg(unix)]
//! `[[hosts.node]]`: a campaign over real nodes driven through agents. Here
//! the nodes are local agents on loopback (no root); the SSH and MTU
//! paths are in `agents_ssh.rs`.

use wirebench_campaign::{RunStatus, Store};

mod common;
use common::campaign;

#[test]
fn local_nodes_run_and_store_every_nodes_cpu_counters_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n.toml");
    let db = dir.path().join("n.db");
    std::fs::write(
        &file,
        "name = \"nodes\"\npackets = 200\nlinger_s = 0.2\nrepetitions = 2\n\
         [hosts]\n\
         [[hosts.node]]\nname = \"a\"\nlocal = true\nrole = \"sender\"\n\
         [[hosts.node]]\nname = \"b\"\nlocal = true\nrole = \"receiver\"\nipv4 = \"127.0.0.1\"\n\
         [[hosts.node]]\nname = \"r1\"\nlocal = true\nrole = \"router\"\n\
         [matrix]\nip = [4]\npayload = [500]\npps = [2000]\n",
    )
    .unwrap();
    let out = campaign(&file, &db, &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store = Store::open(&db).unwrap();
    let c = store.campaigns().unwrap().pop().unwrap();
    let runs = store.runs(c.id).unwrap();
    assert_eq!(runs.len(), 2);
    // The campaign's environment record names every node's system.
    for n in ["a", "b", "r1"] {
        let line = &c.environment.extra[&format!("node {n}")];
        assert!(
            line.contains("kernel ") && line.contains("clock "),
            "{line}"
        );
    }
    for r in &runs {
        assert_eq!(r.status, RunStatus::Ok, "{:?}", r.error);
        let o = r.counters.as_ref().expect("observations");
        for n in ["a", "b", "r1"] {
            assert!(
                o["cpu"][n]["cores"]
                    .as_array()
                    .is_some_and(|c| !c.is_empty()),
                "{o}"
            );
            assert!(o["metadata"][n]["kernel"]
                .as_str()
                .is_some_and(|k| !k.is_empty()));
        }
        assert_eq!(o["roles"]["r1"], "router");
        assert_eq!(o["path_mtu"]["a->b"], 65535, "{o}");
        let doc = r.result.as_ref().unwrap();
        assert_eq!(doc["flows"][0]["received"]["packets"], 200, "{doc}");
    }
}
