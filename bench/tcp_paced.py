#!/usr/bin/env python3
"""Paced TCP flows as S1 sends them, one sender binary beside another.

S1's TCP rows (examples/s1-jumbo-six-os.toml): 60 flows x 3 000 records/s
over two routers, Gigabit links, MTU 9000, offloads off. This runs that
send on a test-bed of its own, IPv4 and IPv6, alternating the sender
binaries run by run (--wirebench, and --base if given; one receiver, the
--wirebench one), and prints per run: payload throughput as % of the
Ethernet bound (docs/metrics.md; TCP MSS = MTU - IP - 32), records sent
and not sent, the flows' schedule error (median of the flows' p50 / p99,
worst max), record delay write -> read (median of the flows' p50 / p99),
the sender's CPU, and, with --perf, its context switches (perf stat).

    bench/tcp_paced.py --wirebench target/release/wirebench \\
        [--base OTHER] [--reps 3] [--flows 60] [--pps 3000] \\
        [--record 1518] [--secs 2] [--ips 4,6] [--perf] \\
        [--bed-name NAME] [--args '--pacers flow'] [--base-args ...]

Run as root. The test-bed (name tp<pid>, or --bed-name) is taken down at
exit, on error and on SIGINT/SIGTERM; the receiver runs in its own process
group and is killed at exit. Traffic stays inside the test-bed.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcp_many as tm  # noqa: E402  (process groups, the bed's teardown)

log = tm.log
PORT = 5482


def bound_mbps(mtu, ip, rate_bps=1e9):
    h = 20 if ip == 4 else 40
    mss = mtu - h - 32
    return rate_bps * mss / (mss + 32 + h + 38) / 1e6


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def one_run(args, binary, extra, ip, workdir, tag):
    out = os.path.join(workdir, f"{tag}.json")
    perf = os.path.join(workdir, f"{tag}.perf")
    send = [binary, "send", "-a", "b", "-p", str(PORT), f"-{ip}", "-T", "tcp",
            "-C", str(args.pps), "-c", str(args.record),
            "--flows", str(args.flows), "-t", str(args.secs * 1000),
            "--json", out] + extra
    if args.perf:
        send = ["perf", "stat", "-x,", "-o", perf,
                "-e", "task-clock,context-switches,cpu-migrations", "--"] + send
    argv = [args.wirebench, "testbed", "exec", "--name", args.bed_name, "a", "--"] + send
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=args.secs + 90)
    if r.returncode != 0:
        raise RuntimeError(f"{tag}: send exit {r.returncode}: {r.stderr[-300:]}")
    doc = json.load(open(out))
    flows = doc["flows"]
    mbps = doc["total"]["throughput_bps"]["payload"] / 1e6
    row = {
        "tag": tag, "ip": ip,
        "mbps": mbps, "pct": 100 * mbps / bound_mbps(9000, ip),
        "sent": sum(f["sent"]["packets"] for f in flows),
        "not_sent": sum(f["sent"].get("not_sent", 0) for f in flows),
        "se_p50": median([f["sent"]["schedule_error_s"]["p50"] for f in flows]),
        "se_p99": median([f["sent"]["schedule_error_s"]["p99"] for f in flows]),
        "se_max": max(f["sent"]["schedule_error_s"]["max"] for f in flows),
        "d_p50": median([f["delay_s"]["p50"] for f in flows if f.get("delay_s")]),
        "d_p99": median([f["delay_s"]["p99"] for f in flows if f.get("delay_s")]),
        "retrans": sum((f.get("tcp") or {}).get("retransmits", 0) for f in flows),
        "cpu": sum((doc.get("cpu") or {}).get("sender", {}).get(k, 0)
                   for k in ("user", "system")),
    }
    if args.perf and os.path.exists(perf):
        for line in open(perf):
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[2] == "context-switches":
                row["cs"] = float(parts[0])
            if len(parts) > 2 and parts[2] == "task-clock":
                row["task_ms"] = float(parts[0])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--base", help="a second sender binary, run alternately")
    ap.add_argument("--args", default="", help="extra send options for --wirebench")
    ap.add_argument("--base-args", default="", help="extra send options for --base")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--flows", type=int, default=60)
    ap.add_argument("--pps", type=int, default=3000)
    ap.add_argument("--record", type=int, default=1518)
    ap.add_argument("--secs", type=int, default=2)
    ap.add_argument("--ips", default="4,6")
    ap.add_argument("--perf", action="store_true")
    ap.add_argument("--bed-name", default=f"tp{os.getpid() % 100000}")
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args()
    if not 0 < args.reps <= 50 or not 0 < args.secs <= 60 or not 0 < args.flows <= 1000:
        ap.error("--reps 1..50, --secs 1..60, --flows 1..1000")
    tm.guard()
    tm.BED = (args.wirebench, args.bed_name)
    r = subprocess.run([args.wirebench, "testbed", "up", "two-routers", "--name",
                        args.bed_name, "--mtu", "9000", "--rate", "1gbit"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"testbed up: {r.stderr.strip()[-300:]}")
    tm.start([args.wirebench, "testbed", "exec", "--name", args.bed_name,
              "b", "--", args.wirebench, "recv", "-p", str(PORT)], subprocess.DEVNULL)
    time.sleep(1)
    senders = [("new", args.wirebench, shlex.split(args.args))]
    if args.base:
        senders.append(("base", args.base, shlex.split(args.base_args)))
    ips = [int(x) for x in args.ips.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="tcp_paced.") as wd:
        for rep in range(args.reps):
            order = senders if rep % 2 == 0 else senders[::-1]
            for ip in ips:
                for label, binary, extra in order:
                    load = os.getloadavg()[0]
                    row = one_run(args, binary, extra, ip, wd, f"{label}-{ip}-{rep}")
                    row.update(label=label, rep=rep, load=load)
                    rows.append(row)
                    log(f"{label} IPv{ip} rep {rep}: {row['pct']:.1f} % of the bound, "
                        f"not sent {row['not_sent']}, load {load:.1f}")
    print("| sender | IP | % of bound | sent | not sent | sched err p50/p99/max ms "
          "| delay p50/p99 ms | retrans | sender CPU s | ctx switches | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['label']} | {r['ip']} | {r['pct']:.1f} | {r['sent']} | {r['not_sent']} "
              f"| {r['se_p50']*1e3:.2f} / {r['se_p99']*1e3:.1f} / {r['se_max']*1e3:.0f} "
              f"| {r['d_p50']*1e3:.0f} / {r['d_p99']*1e3:.0f} | {r['retrans']} "
              f"| {r['cpu']:.2f} | {r.get('cs', float('nan')):.0f} | {r['load']:.1f} |")
    for label, _, _ in senders:
        mine = [r for r in rows if r["label"] == label]
        log(f"{label}: median {median([r['pct'] for r in mine]):.1f} % of the bound, "
            f"{sum(r['pct'] >= 97 for r in mine)} of {len(mine)} within 3 %, "
            f"median delay p50 {median([r['d_p50'] for r in mine])*1e3:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
