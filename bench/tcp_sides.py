#!/usr/bin/env python3
"""Which side of wirebench's many-flow TCP is short: sender or receiver.

Check K1 compares `wirebench send --flows 60` -> `wirebench recv` with
`iperf3 -P 60` on the emulated 1 Gbit/s router test-bed. This swaps one
end at a time, on the same bed in the same run, round-robin over the
four pairs for each repetition:

    ip->ip   iperf3 -c           -> iperf3 -s
    ip->wb   iperf3 -c           -> wirebench recv --iperf3
    wb->ip   wirebench send --iperf3 -> iperf3 -s
    wb->wb   wirebench send      -> wirebench recv

(`--iperf3` runs wirebench's iperf3-speaking ends: its own sender loop
and receiver threads, not the engine's record paths; wb->wb is the only
pair on the engine's record paths.) For each pair it reports the tool's
own total (the iperf3 client's sum_received, or wirebench's result
document total), and two meters common to all pairs: the bytes node b's
interface received over the whole run, with how long that interface was
busy (100 ms samples above a tenth of the link rate) and its rate over
that time, and the TCP segments node a retransmitted (RetransSegs
of its /proc/net/snmp). Medians over the repetitions, and
each pair's ratio to ip->ip in the same round.

    bench/tcp_sides.py --wirebench target/release/wirebench \\
        [--flows 60] [--secs 5] [--record 8000] [--reps 3] [--json FILE]

Run as root. The test-bed (tcps<pid>) and every process started are
removed at exit, on error and on SIGINT/SIGTERM (bench/tcp_many.py's
cleanup). Traffic stays inside the test-bed's namespaces.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcp_many as tm  # noqa: E402  (the shared process and bed handling)

WB_PORT = 5462
WB_IPERF3_PORT = 5463
IPERF_PORT = 5470
PAIRS = ["ip->ip", "ip->wb", "wb->ip", "wb->wb"]
LINK_BPS = 1e9


def netdev_rx_bytes(pid):
    """Bytes received by the non-loopback interfaces of pid's namespace."""
    total = 0
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() != "lo":
                total += int(data.split()[0])
    return total


class LinkMeter:
    """Samples node b's received bytes every 100 ms while a run lasts."""

    def __init__(self, pid):
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic(),
                                     netdev_rx_bytes(self.pid)))
            except OSError:
                return
            self.stop.wait(0.1)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.t.join()

    def figures(self):
        s = self.samples
        if len(s) < 2:
            return None, None, None
        total = s[-1][1] - s[0][1]
        busy_s, busy_b = 0.0, 0
        for (t0, b0), (t1, b1) in zip(s, s[1:]):
            if (b1 - b0) * 8 / (t1 - t0) > LINK_BPS / 10:
                busy_s += t1 - t0
                busy_b += b1 - b0
        return total, busy_s, (busy_b * 8 / busy_s if busy_s else None)


def retrans_segs(ns):
    """RetransSegs of namespace ns's TCP (its /proc/net/snmp)."""
    r = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"],
                       capture_output=True, text=True, timeout=10)
    tcp = [line.split()[1:] for line in r.stdout.splitlines()
           if line.startswith("Tcp:")]
    if len(tcp) == 2 and "RetransSegs" in tcp[0]:
        return int(tcp[1][tcp[0].index("RetransSegs")])
    return None


def iperf3_total(text):
    doc = json.loads(text)
    return doc["end"]["sum_received"]["bits_per_second"]


def wb_total(path):
    with open(path) as f:
        doc = json.load(f)
    os.unlink(path)
    durs = [f["sent"]["duration_s"] for f in doc["flows"]]
    return doc["total"]["throughput_bps"]["payload"], durs


def one(pair, place, a_ns, b_pid, args, workdir):
    """One run of one pair: the tool's total and the common meters."""
    snd, rcv = pair.split("->")
    port = {"ip": IPERF_PORT, "wb": WB_PORT}[rcv]
    if snd == "ip" and rcv == "wb":
        port = WB_IPERF3_PORT
    out = os.path.join(workdir, "wb.json")
    if snd == "ip":
        argv = place.tx + ["iperf3", "-c", place.dest, "-p", str(port),
                           "-P", str(args.flows), "-t", f"{args.secs:g}",
                           "-J"]
    else:
        argv = place.tx + [place.bin, "send", "-a", place.dest, "-p",
                           str(port), "-4", "-T", "tcp", "--max",
                           "--flows", str(args.flows), "-c",
                           str(args.record), "-t",
                           str(int(args.secs * 1000)), "--json", out]
        if rcv == "ip":
            argv.insert(argv.index("send") + 1, "--iperf3")
    r0 = retrans_segs(a_ns)
    with LinkMeter(b_pid) as m:
        [(rc, text)] = tm.run_clients([argv], args.secs + 60, workdir,
                                      "side")
    r1 = retrans_segs(a_ns)
    row = {"pair": pair, "rc": rc, "tool_bps": None, "durations": None}
    try:
        if snd == "ip":
            row["tool_bps"] = iperf3_total(text)
        else:
            row["tool_bps"], row["durations"] = wb_total(out)
    except (OSError, ValueError, KeyError) as e:
        row["note"] = f"rc={rc}: {text.strip()[-200:] or e}"
    row["link_bytes"], row["busy_s"], row["busy_bps"] = m.figures()
    row["retrans"] = (r1 - r0) if r0 is not None and r1 is not None \
        else None
    return row


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec, scale=1.0):
    return "-" if v is None else spec.format(v / scale)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--flows", type=int, default=60)
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--record", type=int, default=8000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    if any(p not in PAIRS for p in pairs) or "ip->ip" not in pairs:
        print(f"--pairs: from {', '.join(PAIRS)}, ip->ip included",
              file=sys.stderr)
        return 2
    if not 1 <= args.flows <= 128:
        print("--flows: 1..128 (one iperf3 process)", file=sys.stderr)
        return 2
    if not 1 <= args.secs <= 60 or not 1 <= args.reps <= 20:
        print("--secs 1..60, --reps 1..20", file=sys.stderr)
        return 2
    if not 24 <= args.record <= 65535:
        print("--record: give 24..65535", file=sys.stderr)
        return 2
    if not shutil.which("iperf3"):
        print("iperf3 missing (scripts/setup)", file=sys.stderr)
        return 2
    workdir = tm.guard("wirebench-tcpsides-")
    binary = os.path.abspath(args.wirebench)
    place = tm.Place("bed", binary)
    a_ns = place.tx[-1]
    sink = open(os.path.join(workdir, "servers.out"), "ab")
    ip_rx = tm.start(place.rx + ["iperf3", "-s", "-p", str(IPERF_PORT)],
                     sink)
    tm.start(place.rx + [binary, "recv", "-q", "-p", str(WB_PORT),
                         "--iperf3", str(WB_IPERF3_PORT)], sink)
    time.sleep(1)
    rows = []
    for rep in range(args.reps):
        for pair in pairs:
            tm.log(f"== round {rep + 1}: {pair}")
            row = one(pair, place, a_ns, ip_rx.pid, args, workdir)
            row["rep"] = rep
            rows.append(row)
            tm.log(f"   tool {fmt(row['tool_bps'], '{:.1f}', 1e6)} Mbit/s, "
                   f"link busy {fmt(row['busy_s'], '{:.2f}')} s at "
                   f"{fmt(row['busy_bps'], '{:.1f}', 1e6)} Mbit/s, "
                   f"retrans {row['retrans']} {row.get('note', '')}")
            time.sleep(1)
    load = open("/proc/loadavg").read().split()[:3]
    print("pair | tool Mbit/s | ÷ ip->ip | link busy s | link Mbit/s "
          "while busy | ÷ ip->ip | retransmits | flows outside "
          f"{args.secs:g} s ±2 %")
    for pair in pairs:
        mine = [r for r in rows if r["pair"] == pair]

        def ratio(key, r):
            base = next(x for x in rows
                        if x["pair"] == "ip->ip" and x["rep"] == r["rep"])
            if r[key] is None or not base[key]:
                return None
            return r[key] / base[key]
        outside = [sum(abs(d / args.secs - 1) > 0.02 for d in r["durations"])
                   for r in mine if r["durations"]]
        print(" | ".join([
            pair,
            fmt(med(r["tool_bps"] for r in mine), "{:.1f}", 1e6),
            fmt(med(ratio("tool_bps", r) for r in mine), "{:.3f}"),
            fmt(med(r["busy_s"] for r in mine), "{:.2f}"),
            fmt(med(r["busy_bps"] for r in mine), "{:.1f}", 1e6),
            fmt(med(ratio("busy_bps", r) for r in mine), "{:.3f}"),
            fmt(med(r["retrans"] for r in mine), "{:.0f}"),
            fmt(med(outside), "{:.0f}") if outside else "-"]))
    print(f"\nmedians of {args.reps}; {args.flows} TCP flows x "
          f"{args.secs:g} s on the 1 Gbit/s router test-bed (MTU 1500), "
          f"wirebench records {args.record} B; link Mbit/s: node b's "
          f"received frame bytes (Ethernet header + IP) while its link was "
          f"busy; retransmits: node a's RetransSegs; load average "
          f"{' '.join(load)} at the end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "wirebench.bench.tcp_sides/1",
                       "args": vars(args), "load": load, "rows": rows},
                      f, indent=1)
    place.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
