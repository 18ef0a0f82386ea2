#!/usr/bin/env python3
"""Zero-copy TCP sends on loopback: wirebench with and without --zerocopy
beside iperf3 with and without -Z, in the same run.

For each record size (64000 B and 1 MiB by default), round-robin over
the four senders for each repetition, one flow for --secs seconds:

    wb        wirebench send -T tcp --max -c SIZE
    wb -z     wirebench send -T tcp --max -c SIZE --zerocopy (MSG_ZEROCOPY)
    ip3       iperf3 -c -l SIZE
    ip3 -Z    iperf3 -c -l SIZE -Z (iperf3's zero-copy is sendfile(2))

and reports, as medians over the repetitions: Gbit/s received (payload),
CPU seconds per Gbit of the sending and of the receiving process (the
tools' own CPU figures: wirebench's result document `cpu`, iperf3's
`cpu_utilization_percent`, both user + system of the process over the
run), and for wb -z the share of sends the kernel reported as copied.
Each row's ratio to `wb` of the same round comes with it.

    bench/tcp_zerocopy.py --wirebench target/release/wirebench \\
        [--sizes 64000,1048576] [--secs 3] [--reps 3] [--json FILE]

Traffic stays on 127.0.0.1. The receivers are started here in their own
process groups and killed at exit, on error and on SIGINT/SIGTERM.
"""

import argparse
import atexit
import json
import os
import signal
import statistics
import subprocess
import sys
import time

WB_PORT = 5481
IPERF_PORT = 5482
MODES = ["wb", "wb -z", "ip3", "ip3 -Z"]
started = []


def cleanup():
    for p in started:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    started.append(p)
    time.sleep(0.5)
    if p.poll() is not None:
        sys.exit(f"{argv[0]} exited at start")
    return p


def run_wb(wb, size, secs, zc):
    argv = [wb, "send", "-a", "127.0.0.1", "-p", str(WB_PORT), "-T", "tcp",
            "--max", "-c", str(size), "-t", str(int(secs * 1000)),
            "--linger", "300", "--json"]
    if zc:
        argv.append("--zerocopy")
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         timeout=secs + 30)
    d = json.loads(out.stdout)
    f = d["flows"][0]
    gbps = d["total"]["throughput_bps"]["payload"] / 1e9
    cpu = d["cpu"]
    tx = cpu["sender"]["user"] + cpu["sender"]["system"]
    rx = cpu["receiver"]["user"] + cpu["receiver"]["system"]
    row = {"gbps": gbps, "tx_cpu": tx, "rx_cpu": rx}
    z = f.get("zerocopy")
    if z:
        row["copied_share"] = z["copied"] / z["sends"] if z["sends"] else 0.0
        row["fallback"] = z.get("fallback")
    return row


def run_iperf3(size, secs, zc):
    argv = ["iperf3", "-c", "127.0.0.1", "-p", str(IPERF_PORT), "-t",
            str(secs), "-l", str(size), "-J"]
    if zc:
        argv.append("-Z")
    out = subprocess.run(argv, capture_output=True, text=True, check=True,
                         timeout=secs + 30)
    d = json.loads(out.stdout)
    end = d["end"]
    gbps = end["sum_received"]["bits_per_second"] / 1e9
    c = end["cpu_utilization_percent"]
    return {"gbps": gbps, "tx_cpu": c["host_total"] / 100,
            "rx_cpu": c["remote_total"] / 100}


def per_gbit(row, key):
    return row[key] / row["gbps"] if row["gbps"] > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--sizes", default="64000,1048576")
    ap.add_argument("--secs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.reps < 1 or a.secs < 1:
        sys.exit("--reps and --secs: at least 1")
    try:
        sizes = [int(s) for s in a.sizes.split(",")]
    except ValueError:
        sys.exit(f"--sizes: comma-separated byte counts, got {a.sizes!r}")
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    start([a.wirebench, "recv", "-B", "127.0.0.1", "-p", str(WB_PORT)])
    start(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IPERF_PORT)])
    load = [os.getloadavg()[0]]
    rows = {}
    for size in sizes:
        for rep in range(a.reps):
            for m in MODES:
                if m.startswith("wb"):
                    r = run_wb(a.wirebench, size, a.secs, m == "wb -z")
                else:
                    r = run_iperf3(size, a.secs, m == "ip3 -Z")
                r["tx_cpu_per_gbit"] = per_gbit(r, "tx_cpu")
                r["rx_cpu_per_gbit"] = per_gbit(r, "rx_cpu")
                rows.setdefault((size, m), []).append(r)
                load.append(os.getloadavg()[0])
    print(f"loopback TCP, 1 flow, {a.secs} s, medians of {a.reps}; "
          f"load average (1 min) {min(load):.2f}..{max(load):.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'size':>8} {'sender':8} {'Gbit/s':>7} {'x wb':>5} "
          f"{'tx CPU s/Gbit':>13} {'rx CPU s/Gbit':>13} {'copied':>6}")
    out = []
    for size in sizes:
        base = statistics.median(r["gbps"] for r in rows[(size, "wb")])
        for m in MODES:
            rs = rows[(size, m)]
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("gbps", "tx_cpu_per_gbit", "rx_cpu_per_gbit")}
            copied = ""
            if m == "wb -z":
                copied = f"{statistics.median(r['copied_share'] for r in rs):.0%}"
                for r in rs:
                    if r.get("fallback"):
                        print(f"  wb -z fell back: {r['fallback']}")
            print(f"{size:>8} {m:8} {med['gbps']:7.2f} "
                  f"{med['gbps'] / base:5.2f} {med['tx_cpu_per_gbit']:13.4f} "
                  f"{med['rx_cpu_per_gbit']:13.4f} {copied:>6}")
            out.append({"size": size, "sender": m, "runs": rs, "median": med})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"load": load, "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
