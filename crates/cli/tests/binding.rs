//! Source address and port (`-sa`/`--bind`, `-sp`/`--cport`), the
//! receiver's data port (`-rp`/`--data-port`) and `--bind-dev`, end to end
//! over loopback with the built binary: the receiver reports where each
//! flow's data came from (`received.from`) and says which port it opened.

mod common;
use common::{bad, free_port, s, send, send_json, u, Recv};
use std::time::Duration;

/// The receiver's "flow N: udp port P" line for flow `n`: the port.
fn opened_port(r: &Recv, n: u16) -> u16 {
    let l = r.wait_for(&format!(" flow {n}: "), Duration::from_secs(5));
    l.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn udp_and_tcp_leave_from_the_address_and_ports_asked() {
    let r = Recv::start(15961);
    for t in ["udp", "tcp"] {
        let run = |extra: &[&str]| {
            let base = ["-a", "127.0.0.1", "-p", "15961", "-T", t, "-C", "1000"];
            send_json(&[&base[..], extra, &["-z", "50", "--linger", "100"]].concat())
        };
        let (cport, dport) = (free_port(), free_port());
        let (cp, dp) = (cport.to_string(), dport.to_string());
        let doc = run(&["-sa", "127.0.0.2", "-sp", &cp, "-rp", &dp, "-c", "100"]);
        let fl = &doc["flows"][0];
        assert_eq!(u(fl, "received.unique"), 50, "{t}");
        assert_eq!(s(fl, "received.from"), format!("127.0.0.2:{cport}"), "{t}");
        assert_eq!(s(fl, "src"), "127.0.0.2", "{t}");
        assert_eq!(u(fl, "socket.data_port"), u64::from(dport), "{t}");
        assert_eq!(opened_port(&r, 1), dport, "{t}");
        // Without them the kernel chooses: the control connection's address.
        let doc = run(&[]);
        let from = s(&doc["flows"][0], "received.from");
        assert!(from.starts_with("127.0.0.1:"), "{t}: {from}");
        assert_ne!(opened_port(&r, 1), dport);
    }
}

#[test]
fn a_data_port_the_receiver_cannot_open_is_refused_naming_it() {
    let _r = Recv::start(15962);
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let p = taken.local_addr().unwrap().port().to_string();
    let out = send(&[
        "-a",
        "127.0.0.1",
        "-p",
        "15962",
        "--data-port",
        &p,
        "-z",
        "10",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--data-port") && err.contains(&format!("data port {p}")),
        "{err}"
    );
}

#[test]
fn bind_dev_lo_works_and_a_missing_device_exits_2() {
    let _r = Recv::start(15963);
    let doc = send_json(&[
        "-a",
        "127.0.0.1",
        "-p",
        "15963",
        "--bind-dev",
        "lo",
        "-C",
        "1000",
        "-z",
        "30",
        "--linger",
        "100",
    ]);
    assert_eq!(u(&doc["flows"][0], "received.unique"), 30);
    assert_eq!(s(&doc["flows"][0], "socket.bind_dev"), "lo");
    bad(
        &["-a", "127.0.0.1", "-p", "15963", "--bind-dev", "nosuchdev0"],
        "--bind-dev: no network interface named \"nosuchdev0\"",
    );
}

#[test]
fn bad_binding_values_exit_2_naming_the_option() {
    bad(&["-a", "127.0.0.1", "-sa", "host"], "--bind");
    bad(&["-a", "127.0.0.1", "-sp", "0"], "--cport");
    bad(&["-a", "127.0.0.1", "-rp", "80"], "--data-port");
    bad(&["-a", "127.0.0.1", "--bind-dev", "a/b"], "--bind-dev");
    bad(
        &["-a", "127.0.0.1", "--flows", "2", "--cport", "9000"],
        "--cport",
    );
    bad(&["-a", "::1", "-sa", "127.0.0.1", "-z", "5"], "-sa/--bind");
    bad(&["-a", "127.0.0.1", "-R", "-sa", "127.0.0.2"], "-R/--bidir");
}

/// A D-ITG script line with -sa/-sp/-rp, beside one without: two sessions
/// (one per source address) in one document.
#[test]
fn a_script_line_names_its_source_and_data_port() {
    let r = Recv::start(15964);
    let (cport, dport) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("flows.ditg");
    std::fs::write(
        &script,
        format!(
            "-a 127.0.0.1 -sa 127.0.0.3 -sp {cport} -rp {dport} -T TCP -C 500 -c 100 -z 40\n\
             -a 127.0.0.1 -C 1000 -c 100 -z 60\n"
        ),
    )
    .unwrap();
    let doc = send_json(&[
        "-p",
        "15964",
        "--script",
        script.to_str().unwrap(),
        "--linger",
        "100",
    ]);
    let flows = doc["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2);
    assert_eq!(u(&flows[0], "received.unique"), 40);
    assert_eq!(s(&flows[0], "received.from"), format!("127.0.0.3:{cport}"));
    assert_eq!(u(&flows[1], "received.unique"), 60);
    assert!(s(&flows[1], "received.from").starts_with("127.0.0.1:"));
    let log = (0..2)
        .map(|_| r.wait_for(" flow 1: ", Duration::from_secs(5)))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(log.contains(&format!("tcp port {dport}")), "{log}");
}
