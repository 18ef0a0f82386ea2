#!/usr/bin/env python3
"""Check K1's two commands in pairs on one kept-up bed, with verdicts.

Check K1 runs `iperf3 -P 60 -t 5` and then `wirebench send -T tcp --max
--flows 60 -c 8000 -t 5000` once each on a fresh 1 Gbit/s router test-bed
(MTU 1500) and fails when wirebench carries less than 0.97 x iperf3's
total, retransmits more than 3 x iperf3's + 100, or a flow lasts outside
5 s +- 2 %. One run of each is one sample of two noisy quantities (drop
episodes at node a's 1000-packet queue); this repeats the pair N times
on one bed and says how often each tool meets an episode and how often
K1's verdict passes.

Each pair runs iperf3 once, then every wirebench variant (`--variants`),
and with `--baseline` a second iperf3 run; the order rotates from pair to
pair (so with one variant it alternates). Per run: the tool's own total
(iperf3's sum_received, wirebench's total payload throughput), its
retransmits (iperf3's sum_sent, the sum of wirebench's flows' TCP_INFO),
the packets node a's qdiscs dropped (the largest `dropped` counter of
node a's qdiscs, before and after: tbf and its pfifo child count the same
drops), and the flows outside 5 s +- 2 % (wirebench). Each wirebench run
gets K1's verdict against its pair's iperf3 run; with `--baseline` the
second iperf3 run gets K1's retransmit and ratio clauses against the
first (how often iperf3 fails K1 against itself).

A variant is NAME or NAME:VAR=VALUE[:VAR=VALUE...]: environment set for
wirebench's sender only, for study builds that read knobs from it (the
write-size, stagger and turn knobs of docs/performance.md's "K1's
retransmits in pairs" were such temporary builds; the product reads
none), e.g. `--variants default,big:WB_STUDY_BULK_WRITE=131072`, or
the same binary twice under two names as a control; a variant with
IPERF3_ARGS runs iperf3 with those arguments added instead (e.g.
`ip64k:IPERF3_ARGS=-l 64000`), judged against the pair's plain iperf3 run.

    flock /tmp/wb-measure.lock python3 bench/k1_pairs.py \\
        --wirebench target/release/wirebench [--pairs 12] [--baseline] \\
        [--variants default] [--bed-name NAME] [--json FILE]

Run as root. The test-bed (k1p<pid> unless --bed-name) and every process
started are removed at exit, on error and on SIGINT/SIGTERM
(bench/tcp_many.py's cleanup). Traffic stays inside the bed.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcp_many as tm  # noqa: E402  (the shared process and bed handling)

WB_PORT = 5482
IPERF_PORT = 5481
FLOWS = 60
SECS = 5


def load():
    return float(open("/proc/loadavg").read().split()[0])


def qdisc_drops(ns):
    """Largest `dropped` counter among namespace ns's qdiscs."""
    r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc"],
                       capture_output=True, text=True, timeout=10)
    vals = [int(x) for x in re.findall(r"dropped (\d+)", r.stdout)]
    return max(vals) if vals else None


def backlog_drops():
    """Per-CPU backlog drops of the whole host (softnet_stat's second
    column): host-wide, so other beds on the host add to it."""
    with open("/proc/net/softnet_stat") as f:
        return sum(int(line.split()[1], 16) for line in f if line.strip())


# Node a's TCP counters read around each run: lost-and-resent segments
# against reordering the sender detected (SACK/DSACK) and tail-loss probes.
NSTAT = ["RetransSegs", "TCPDSACKRecv", "TCPSACKReorder", "TCPLossProbes",
         "TCPFastRetrans", "TCPLostRetransmit"]


def tcp_counters(ns):
    """Selected Tcp/TcpExt counters of namespace ns (/proc/net/snmp and
    netstat of the namespace)."""
    r = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp",
                        "/proc/net/netstat"],
                       capture_output=True, text=True, timeout=10)
    lines = r.stdout.splitlines()
    out = {}
    for head, vals in zip(lines, lines[1:]):
        h, v = head.split(), vals.split()
        if h and v and h[0] == v[0] and h[0] in ("Tcp:", "TcpExt:") \
                and not v[1].lstrip("-").isalpha():
            for k, x in zip(h[1:], v[1:]):
                if k in NSTAT:
                    out[k] = int(x)
    return out


def parse_variant(text):
    name, *sets = text.split(":")
    env = {}
    for s in sets:
        k, _, v = s.partition("=")
        if not k or not v:
            raise ValueError(f"variant {text!r}: want VAR=VALUE after ':'")
        env[k] = v
    return name, env


def run_one(kind, env, place, a_ns, workdir):
    """One run: total bit/s, retransmits, node a's drops, flows outside."""
    out = os.path.join(workdir, "wb.json")
    if kind == "iperf3":
        argv = place.tx + ["iperf3", "-c", place.dest, "-p", str(IPERF_PORT),
                           "-P", str(FLOWS), "-t", str(SECS), "-J"] + \
            env.get("IPERF3_ARGS", "").split()
    else:
        argv = place.tx + ["env"] + [f"{k}={v}" for k, v in env.items()] + [
            place.bin, "send", "-a", place.dest, "-p", str(WB_PORT), "-4",
            "-T", "tcp", "--max", "--flows", str(FLOWS), "-c", "8000",
            "-t", str(SECS * 1000), "--json", out]
    d0, b0, l0 = qdisc_drops(a_ns), backlog_drops(), load()
    c0 = tcp_counters(a_ns)
    [(rc, text)] = tm.run_clients([argv], SECS + 60, workdir, "k1")
    d1 = qdisc_drops(a_ns)
    row = {"rc": rc, "bps": None, "retrans": None, "outside": None,
           "drops": d1 - d0 if d0 is not None and d1 is not None else None,
           "backlog": backlog_drops() - b0,
           "nstat": {k: v - c0.get(k, 0)
                     for k, v in tcp_counters(a_ns).items()},
           "load": [l0, load()]}
    try:
        if kind == "iperf3":
            doc = json.loads(text)
            row["bps"] = doc["end"]["sum_received"]["bits_per_second"]
            row["retrans"] = doc["end"]["sum_sent"].get("retransmits", 0)
        else:
            with open(out) as f:
                doc = json.load(f)
            os.unlink(out)
            fl = doc["flows"]
            row["bps"] = doc["total"]["throughput_bps"]["payload"]
            row["retrans"] = sum(f.get("tcp", {}).get("retransmits", 0)
                                 for f in fl)
            row["outside"] = sum(abs(f["sent"]["duration_s"] / SECS - 1)
                                 > 0.02 for f in fl)
    except (OSError, ValueError, KeyError, TypeError) as e:
        row["note"] = f"rc={rc}: {text.strip()[-200:] or e}"
    return row


def verdict(run, base):
    """K1's clauses for `run` against `base` (None: a run failed)."""
    if run["bps"] is None or base["bps"] is None:
        return None
    ratio = run["bps"] / base["bps"]
    rx_ok = run["retrans"] <= 3 * base["retrans"] + 100
    return {"ratio": ratio, "ratio_ok": ratio >= 0.97, "retrans_ok": rx_ok,
            "pass": ratio >= 0.97 and rx_ok and not run["outside"]}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rng(xs):
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "-"


def summary(name, rows, verdicts):
    rx = [r["retrans"] for r in rows if r["retrans"] is not None]
    n = len(rx)
    bps = med(r["bps"] for r in rows)
    dr = [r["drops"] for r in rows if r["drops"] is not None]
    bl = [r["backlog"] for r in rows]
    v = [x for x in verdicts if x is not None]
    k1 = (f"{sum(x['pass'] for x in v)} of {len(v)} "
          f"(retransmit clause {sum(x['retrans_ok'] for x in v)}, ratio "
          f"{sum(x['ratio_ok'] for x in v)}; ratio median "
          f"{med(x['ratio'] for x in v):.3f})") if v else "-"
    print(f"{name} | {n} | "
          f"{'-' if bps is None else f'{bps / 1e6:.1f}'} | "
          f"{med(rx) if rx else '-'} ({rng(rx)}) | "
          f"{sum(x > 1000 for x in rx)} | {sum(x > 3000 for x in rx)} | "
          f"{med(dr) if dr else '-'} ({rng(dr)}), {sum(x > 1000 for x in dr)} "
          f"over 1000 | {med(bl)} ({rng(bl)}) | {k1}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--variants", default="default")
    ap.add_argument("--baseline", action="store_true",
                    help="a second iperf3 run per pair, judged against "
                    "the first")
    ap.add_argument("--bed-name", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not 1 <= args.pairs <= 30:
        print("--pairs: 1..30", file=sys.stderr)
        return 2
    try:
        variants = [parse_variant(v) for v in args.variants.split(",") if v]
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if not variants or len({n for n, _ in variants}) != len(variants) or \
            any(n in ("iperf3", "iperf3b") for n, _ in variants):
        print("--variants: distinct names, not iperf3/iperf3b",
              file=sys.stderr)
        return 2
    if not shutil.which("iperf3"):
        print("iperf3 missing (scripts/setup)", file=sys.stderr)
        return 2
    workdir = tm.guard("wirebench-k1pairs-")
    binary = os.path.abspath(args.wirebench)
    place = tm.Place("bed", binary,
                     bed_name=args.bed_name or f"k1p{os.getpid()}")
    a_ns = place.tx[-1]
    sink = open(os.path.join(workdir, "servers.out"), "ab")
    tm.start(place.rx + ["iperf3", "-s", "-p", str(IPERF_PORT)], sink)
    tm.start(place.rx + [binary, "recv", "-q", "-p", str(WB_PORT)], sink)
    time.sleep(1)
    kinds = ["iperf3"] + [n for n, _ in variants] + \
        (["iperf3b"] if args.baseline else [])
    envs = dict(variants)
    runs = {k: [] for k in kinds}
    for p in range(args.pairs):
        order = kinds[p % len(kinds):] + kinds[:p % len(kinds)]
        for k in order:
            tool = "iperf3" if k.startswith("iperf3") or \
                "IPERF3_ARGS" in envs.get(k, {}) else "wirebench"
            row = run_one(tool, envs.get(k, {}), place, a_ns, workdir)
            row["pair"] = p
            runs[k].append(row)
            mb = "-" if row["bps"] is None else f"{row['bps'] / 1e6:.1f}"
            tm.log(f"pair {p + 1} {k}: {mb} Mbit/s, retransmits "
                   f"{row['retrans']}, node a drops {row['drops']}, backlog "
                   f"{row['backlog']}, {row['nstat']}, "
                   f"outside {row['outside']}, load {row['load'][0]:.1f}"
                   f"->{row['load'][1]:.1f} {row.get('note', '')}")
            time.sleep(1)
    verdicts = {}
    for k in kinds[1:]:
        verdicts[k] = [verdict(r, b) for r, b in zip(runs[k], runs["iperf3"])]
        for r, v in zip(runs[k], verdicts[k]):
            r["verdict"] = v
    loads = [x for rs in runs.values() for r in rs for x in r["load"]]
    print("run | runs | total Mbit/s (median) | retransmits median "
          "(range) | runs > 1 000 | runs > 3 000 | node a drops median "
          "(range) | host backlog drops median (range) | K1 met against the "
          "pair's iperf3")
    for k in kinds:
        summary(k, runs[k], verdicts.get(k, []))
    print(f"\n{args.pairs} pairs, {FLOWS} TCP flows x {SECS} s on the 1 "
          f"Gbit/s router bed (MTU 1500, default queue); iperf3b: a second "
          f"iperf3 run judged by K1's ratio and retransmit clauses against "
          f"the first; load {min(loads):.1f}-{max(loads):.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "wirebench.bench.k1_pairs/1",
                       "args": vars(args), "runs": runs}, f, indent=1)
    place.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
