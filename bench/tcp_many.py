#!/usr/bin/env python3
"""Many TCP flows at once: wirebench beside iperf3 -P and D-ITG multi-flow.

For each place (loopback; the emulated 1 Gbit/s router test-bed, MTU 1500)
and each flow count, one session per tool, all bulk TCP for the same
seconds: the total received goodput, the per-flow spread (slowest and
fastest flow, Jain's fairness index over the flows' goodputs), the
senders' TCP retransmits, and the CPU of sender and receiver per Gbit/s.

iperf3 takes at most 128 streams per process: beyond that it runs as
several client processes at once (256 flows: 2 x -P 128; 1000 flows:
8 processes of 125), each against a server of its own. D-ITG runs one
ITGSend script of N lines (a thread per flow at each end).

    bench/tcp_many.py --wirebench target/release/wirebench \\
        [--places loopback,bed] [--flows 1,8,60,256,1000] [--secs 5] \\
        [--record 8000] [--tools wirebench,iperf3,ditg] [--json FILE] \\
        [--queue 16MiB]

Run as root (test-bed namespaces). Every process it starts is in its own
process group and is killed at exit; the test-bed (name tcpm<pid>, or
--bed-name) is taken down at exit, on error and on SIGINT/SIGTERM. Traffic stays on
127.0.0.1 or inside the test-bed's namespaces.
"""

import argparse
import atexit
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROCS = []          # every long-running process we started
BED = None          # (wirebench binary, test-bed name) while one is up
WB_PORT = 5462
IPERF_PORT = 5470   # servers on IPERF_PORT .. + 7
ITG_SIG_PORT = 9480
ITG_DATA_PORT = 20000
IPERF_MAX_P = 128


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
    for p in PROCS:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    PROCS.clear()
    global BED
    if BED:
        binary, name = BED
        subprocess.run([binary, "testbed", "down", "--name", name],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        BED = None


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def guard(workdir_prefix=None):
    """Stops every process and test-bed started here at exit and on
    SIGINT/SIGTERM; with a prefix, also makes a scratch directory that
    goes with them, and returns it."""
    atexit.register(cleanup)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if workdir_prefix is None:
        return None
    workdir = tempfile.mkdtemp(prefix=workdir_prefix)
    atexit.register(shutil.rmtree, workdir, True)
    return workdir


class Place:
    """Where the flows run: loopback, or node a to node b of a test-bed."""

    def __init__(self, name, binary, queue=None, bed_name=None):
        self.name = name
        self.bin = binary
        if name == "loopback":
            self.dest, self.tx, self.rx = "127.0.0.1", [], []
            return
        global BED
        bed = bed_name or f"tcpm{os.getpid()}"
        up = [binary, "testbed", "up", "router", "--name", bed,
              "--rate", "1gbit", "--mtu", "1500"]
        if queue:
            up += ["--queue", queue]
        r = subprocess.run(up,
                           capture_output=True, text=True, timeout=120)
        BED = (binary, bed)
        if r.returncode != 0:
            raise RuntimeError(f"testbed up: {r.stderr.strip()[-300:]}")
        self.dest = "b"
        self.tx = ["ip", "netns", "exec", f"wb-{bed}-a"]
        self.rx = ["ip", "netns", "exec", f"wb-{bed}-b"]

    def down(self):
        global BED
        if self.name != "loopback" and BED:
            subprocess.run([self.bin, "testbed", "down", "--name", BED[1]],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
            BED = None


def start(argv, out):
    # ip netns exec execs the command: the pid is the tool's own, so its
    # /proc/<pid>/stat counts its CPU.
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
    PROCS.append(p)
    return p


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    if p in PROCS:
        PROCS.remove(p)


def cpu_s(pid):
    """User + system CPU seconds of a running process (threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def jain(xs):
    s, q = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * q) if xs and q > 0 else None


def run_clients(argvs, timeout, workdir, tag):
    """Runs the clients at once; their outputs (text) and return codes."""
    procs = []
    for i, argv in enumerate(argvs):
        path = os.path.join(workdir, f"{tag}-{i}.out")
        f = open(path, "wb")
        procs.append((subprocess.Popen(argv, stdout=f,
                                       stderr=subprocess.STDOUT,
                                       start_new_session=True), f, path))
    deadline = time.monotonic() + timeout
    outs = []
    for p, f, path in procs:
        try:
            rc = p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
        f.close()
        with open(path, "rb") as g:
            outs.append((rc, g.read().decode(errors="replace")))
        os.unlink(path)
    return outs


class Trial:
    def __init__(self, place, tool, n):
        self.place, self.tool, self.n = place, tool, n
        self.total_bps = None
        self.flow_bps = []      # each flow's goodput over the session
        self.retrans = None
        self.cpu_s = None       # sender + receiver CPU seconds
        self.secs = None
        self.note = ""

    def row(self):
        fl = self.flow_bps
        gbps = (self.total_bps or 0) / 1e9
        return {
            "place": self.place, "tool": self.tool, "flows": self.n,
            "total_bps": self.total_bps,
            "min_flow_bps": min(fl) if fl else None,
            "max_flow_bps": max(fl) if fl else None,
            "jain": jain(fl),
            "retransmits": self.retrans,
            "cpu_per_gbps": (self.cpu_s / self.secs / gbps
                             if self.cpu_s and self.secs and gbps > 0
                             else None),
            "note": self.note,
        }


def wirebench(place, rx_pid, n, secs, record, workdir):
    t = Trial(place.name, "wirebench", n)
    out = os.path.join(workdir, "wb.json")
    c0, r0 = children_cpu_s(), cpu_s(rx_pid)
    [(rc, text)] = run_clients(
        [place.tx + [place.bin, "send", "-a", place.dest, "-p", str(WB_PORT),
                     "-4", "-T", "tcp", "--max", "--flows", str(n),
                     "-c", str(record), "-t", str(int(secs * 1000)),
                     "--linger", "1000", "--json", out]],
        secs + 60 + n / 20, workdir, "wb")
    t.cpu_s = children_cpu_s() - c0 + cpu_s(rx_pid) - r0
    t.secs = secs
    try:
        with open(out) as f:
            doc = json.load(f)
        os.unlink(out)
    except (OSError, ValueError):
        t.note = f"send rc={rc}: {text.strip()[-200:]}"
        return t
    t.total_bps = doc["total"]["throughput_bps"]["payload"]
    # Over the session's seconds, as iperf3 and D-ITG below.
    t.flow_bps = [f["received"]["bytes"] * 8 / secs for f in doc["flows"]]
    t.retrans = sum(f.get("tcp", {}).get("retransmits", 0)
                    for f in doc["flows"])
    if doc.get("partial"):
        t.note = f"partial: {doc.get('partial_reason', '')[:120]}"
    return t


def iperf3(place, rx_pids, n, secs, workdir):
    t = Trial(place.name, "iperf3", n)
    procs = -(-n // IPERF_MAX_P)
    if procs > len(rx_pids):
        t.note = f"needs {procs} iperf3 processes"
        return t
    per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    c0 = children_cpu_s()
    r0 = sum(cpu_s(p) for p in rx_pids)
    outs = run_clients(
        [place.tx + ["iperf3", "-c", place.dest, "-p", str(IPERF_PORT + i),
                     "-P", str(k), "-t", f"{secs:g}", "-J"]
         for i, k in enumerate(per)], secs + 60, workdir, "ip")
    t.cpu_s = children_cpu_s() - c0 + sum(cpu_s(p) for p in rx_pids) - r0
    t.secs = secs
    total, retr = 0.0, 0
    for rc, text in outs:
        try:
            doc = json.loads(text)
            end = doc["end"]
            total += end["sum_received"]["bits_per_second"]
            retr += end["sum_sent"].get("retransmits", 0)
            t.flow_bps += [s["receiver"]["bits_per_second"]
                           for s in end["streams"]]
        except (ValueError, KeyError) as e:
            t.note = f"iperf3 rc={rc}: {text.strip()[-200:] or e}"
            return t
    t.total_bps, t.retrans = total, retr
    if procs > 1:
        t.note = f"{procs} processes: {'+'.join(map(str, per))} streams"
    return t


def itgdec_flows(text):
    """Per-flow (bytes, seconds) from ITGDec's per-flow blocks, and the
    TOTAL block's time (first to last packet of all flows)."""
    flows, cur, total = [], {}, False
    total_s = None
    for line in text.splitlines():
        if line.startswith("Flow number"):
            cur = {}
        elif "Total time" in line and "=" in line:
            secs = float(line.split("=")[1].split()[0])
            if total:
                total_s = secs
            cur["secs"] = secs
        elif line.strip().startswith("Bytes received") and "=" in line:
            cur["bytes"] = int(line.split("=")[1].split()[0])
            if "secs" in cur and not total:
                flows.append((cur["bytes"], cur["secs"]))
        elif "TOTAL" in line and "*" in line:
            total = True
    return flows, total_s


def ditg(place, n, secs, record, workdir):
    t = Trial(place.name, "ditg", n)
    script = os.path.join(workdir, "itg.script")
    with open(script, "w") as f:
        for i in range(n):
            f.write(f"-a {place.dest} -Sdp {ITG_SIG_PORT} "
                    f"-rp {ITG_DATA_PORT + i} -T TCP -C 1000000 "
                    f"-c {record} -t {int(secs * 1000)}\n")
    rlog = os.path.join(workdir, "itg-r.log")
    rx = start(place.rx + ["ITGRecv", "-Sp", str(ITG_SIG_PORT)],
               open(os.path.join(workdir, "itgrecv.out"), "wb"))
    time.sleep(0.5)
    c0, r0 = children_cpu_s(), cpu_s(rx.pid)
    [(rc, text)] = run_clients(
        [place.tx + ["ITGSend", script, "-x", rlog]],
        secs + 20 + n / 50, workdir, "itg")
    t.cpu_s = children_cpu_s() - c0 + cpu_s(rx.pid) - r0
    t.secs = secs
    time.sleep(1)
    stop(rx)
    if rc != 0:
        t.note = ("ITGSend did not exit (killed)" if rc is None
                  else f"ITGSend rc={rc}")
    if not os.path.exists(rlog):
        t.note = (t.note + "; " if t.note else "") + "no receiver log"
        return t
    dec = subprocess.run(["ITGDec", rlog], capture_output=True, text=True,
                         timeout=300).stdout
    os.unlink(rlog)
    flows, total_s = itgdec_flows(dec)
    # Over the whole log's span (flows of a sender that overran went on
    # past the session's seconds); flows missing from the log got nothing.
    span = max(secs, total_s or 0.0)
    t.flow_bps = [b * 8 / span for b, _ in flows] + [0.0] * (n - len(flows))
    t.total_bps = sum(b for b, _ in flows) * 8 / span
    if len(flows) < n:
        t.note = (t.note + "; " if t.note else "") + \
            f"{n - len(flows)} flows missing from the receiver's log"
    return t


def fmt(v, spec, scale=1.0):
    return "-" if v is None else spec.format(v / scale)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--places", default="loopback,bed")
    ap.add_argument("--flows", default="1,8,60,256,1000")
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--record", type=int, default=8000,
                    help="wirebench and D-ITG record bytes (iperf3 writes "
                    "its default 128 KiB)")
    ap.add_argument("--tools", default="wirebench,iperf3,ditg")
    ap.add_argument("--json", default=None)
    ap.add_argument("--bed-name", default=None,
                    help="the test-bed's name (1-12 lowercase letters/digits; "
                    "default tcpm<pid>), so that runs beside others' beds "
                    "keep to their own")
    ap.add_argument("--queue", default=None,
                    help="the bed's queue at each end of a link (testbed up "
                    "--queue: 1000p, 16MiB, 20ms); default the bed's own")
    args = ap.parse_args()
    try:
        flows = [int(x) for x in args.flows.split(",") if x.strip()]
    except ValueError:
        print(f"--flows: give a comma list of flow counts, got {args.flows!r}",
              file=sys.stderr)
        return 2
    if not flows or any(not 1 <= n <= 1024 for n in flows):
        print("--flows: each 1..1024", file=sys.stderr)
        return 2
    if not 1 <= args.secs <= 60:
        print("--secs: give 1..60", file=sys.stderr)
        return 2
    if not 24 <= args.record <= 65535:
        print("--record: give 24..65535", file=sys.stderr)
        return 2
    places = [p.strip() for p in args.places.split(",") if p.strip()]
    if any(p not in ("loopback", "bed") for p in places):
        print("--places: loopback, bed", file=sys.stderr)
        return 2
    tools = [x.strip() for x in args.tools.split(",") if x.strip()]
    if any(x not in ("wirebench", "iperf3", "ditg") for x in tools):
        print("--tools: wirebench, iperf3, ditg", file=sys.stderr)
        return 2
    for x, cmd in (("iperf3", "iperf3"), ("ditg", "ITGSend")):
        if x in tools and not shutil.which(cmd):
            log(f"{x}: {cmd} not installed (scripts/setup); left out")
            tools.remove(x)
    workdir = guard("wirebench-tcpmany-")
    binary = os.path.abspath(args.wirebench)
    rows = []
    for pname in places:
        place = Place(pname, binary, args.queue, args.bed_name)
        sink = open(os.path.join(workdir, "servers.out"), "ab")
        # The receiver's default budgets: one-way TCP flows share one
        # receive worker per CPU, so 1000 flows fit its 512 threads.
        wb_rx = start(place.rx + [binary, "recv", "-q", "-p", str(WB_PORT)],
                      sink) if "wirebench" in tools else None
        need_ip = -(-max(flows) // IPERF_MAX_P)
        ip_rx = ([start(place.rx + ["iperf3", "-s", "-p",
                                    str(IPERF_PORT + i)], sink)
                  for i in range(min(need_ip, 8))]
                 if "iperf3" in tools else [])
        time.sleep(1)
        for n in flows:
            for tool in tools:
                log(f"== {pname}: {tool}, {n} TCP flows, {args.secs:g} s")
                if tool == "wirebench":
                    t = wirebench(place, wb_rx.pid, n, args.secs,
                                  args.record, workdir)
                elif tool == "iperf3":
                    t = iperf3(place, [p.pid for p in ip_rx], n, args.secs,
                               workdir)
                else:
                    t = ditg(place, n, args.secs, args.record, workdir)
                r = t.row()
                rows.append(r)
                log(f"   total {fmt(r['total_bps'], '{:.1f}', 1e6)} Mbit/s"
                    f", Jain {fmt(r['jain'], '{:.3f}')}, retransmits "
                    f"{r['retransmits']} {r['note']}")
                time.sleep(1)
        for p in ([wb_rx] if wb_rx else []) + ip_rx:
            stop(p)
        place.down()
    # The table: each tool's figures, and wirebench's total over iperf3's.
    head = ["place", "flows", "tool", "total Mbit/s", "÷ iperf3",
            "min–max flow Mbit/s", "Jain", "retransmits",
            "CPU cores per Gbit/s", "note"]
    print(" | ".join(head))
    for r in rows:
        ip = next((x for x in rows if x["tool"] == "iperf3"
                   and x["place"] == r["place"] and x["flows"] == r["flows"]),
                  None)
        ratio = (r["total_bps"] / ip["total_bps"]
                 if ip and ip["total_bps"] and r["total_bps"] is not None
                 else None)
        print(" | ".join([
            r["place"], str(r["flows"]), r["tool"],
            fmt(r["total_bps"], "{:.1f}", 1e6), fmt(ratio, "{:.3f}"),
            f"{fmt(r['min_flow_bps'], '{:.2f}', 1e6)}–"
            f"{fmt(r['max_flow_bps'], '{:.2f}', 1e6)}",
            fmt(r["jain"], "{:.3f}"), str(r["retransmits"]),
            fmt(r["cpu_per_gbps"], "{:.3f}"), r["note"]]))
    print(f"\n{args.secs:g} s sessions, bulk TCP, records {args.record} B "
          f"(iperf3: its default writes); host {os.cpu_count()} CPUs, "
          f"load average {open('/proc/loadavg').read().split()[:3]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "wirebench.bench.tcp_many/1",
                       "args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
