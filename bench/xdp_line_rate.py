#!/usr/bin/env python3
"""Small packets on the `direct` test-bed (a -- b over veth, root): the
AF_XDP path beside the socket path, iperf3 and D-ITG, and the veth path's
own limit. bench/compare.sh runs it as `--sections xdp`.

Rows, 64-byte UDP payloads, medians of --reps runs:
  path limit, XDP drop   frames/s b's XDP program dropped while a flood
                         ran on a (the xdp_path example): by live frames
                         (--limit-by live, the default: `send --xdp-tx
                         live`'s sender, no skb per frame) or an AF_XDP
                         ring flood (--limit-by ring, whose own cost was
                         the limit before live frames), the flood pinned
                         to its own CPU (--sender-cpu, taskset) and the
                         sink to another: what the kernel carries over
                         veth on this host, the ceiling for --xdp
  path limit, AF_XDP rx  the same, taken off AF_XDP rings on b (copy mode:
                         the kernel copies every frame into the UMEM);
                         with threaded NAPI the program and the copy run
                         in b's NAPI thread, which the scheduler places
                         freely (not pinned)
  wirebench --xdp        send --xdp / recv --xdp --xdp-rx ring, --max: delivered
                         pps, loss (every frame through AF_XDP receive rings)
  wirebench --xdp, records  the same with recv --xdp-rx records (row `rec`):
                         b's XDP program writes each frame's receive record
                         into a BPF map and drops the frame (recv's default
                         for sessions without probe MACs)
  wirebench socket path  send / recv, --max
  iperf3                 -u -b 0 -l 64
  D-ITG                  -C 2000000 -c 64 (its own pacing at full speed)
and paced --xdp flows at 100 kpps and 1 Mpps (row `paced`, the issue's
acceptance: rate within +-0.1 %, p99 schedule error under 50 us on a quiet
host; the receiver as `recv --xdp` runs by default, i.e. receive records,
`--xdp-rx auto`): achieved rate error (sent.rate_pps against the asked rate), the
p99 schedule error (sent.schedule_error_s: hand-off to the ring less the
packet's scheduled time), loss, and the verdict against those goals. The
XDP-drop limit of the same repetition is printed beside each paced rate:
a paced rate above what the path carries cannot be met on this host
whatever the pacer does. --paced sets the rates (default 100000,1000000);
F*max asks F times the --xdp --max rate (records row `rec`, else the
rings row `xdp`) of the same repetition and NAPI setting, e.g. --paced 100000,0.9*max for the accuracy at 0.9 of what the
path carried.

Delivered pps = packets received / the sender's duration. Every run is
printed as it ends (with the load average), and each repetition's --xdp
rate is also given as a share of the limit measured in the same
repetition, since on a shared host absolute figures move with the load.
For --xdp the sending host's drops (frames the veth driver refused,
`sendto` EBUSY) and the receiving host's (AF_XDP ring drops) come from the
result document. --rows picks rows (default: all).

--napi picks threaded NAPI on b's eth0 for the XDP rows (drop, count,
xdp, paced), as `recv --xdp-napi` and the sink's last argument: auto (the
default here: switched on, since eth0 is a test-bed's own veth and the
sender sends by AF_XDP; O1's commands get `recv`'s default, off), off, or
both, which runs every XDP row under each setting in turn within each
repetition (interleaved) and prints both. The flood and `send --xdp` give
a's eth0 the session's sending queue (`--xdp-txq auto`). The socket-path,
iperf3 and D-ITG rows never attach a program, so the setting does not
reach them (it is restored when each XDP run ends).

The test-bed (--name, default `wbxdpb`) and every process this script
starts are removed at the end, also on Ctrl-C.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

NAME = "wbxdpb"
A, B = f"wb-{NAME}-a", f"wb-{NAME}-b"


def set_name(name):
    global NAME, A, B
    NAME = name
    A, B = f"wb-{NAME}-a", f"wb-{NAME}-b"
DST4 = "10.0.1.2"
SIZE = 64
PROCS = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def ns(node, argv):
    return ["ip", "netns", "exec", node] + argv


def run(argv, timeout):
    try:
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        return r.returncode, r.stdout
    except subprocess.TimeoutExpired:
        return 124, ""


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    PROCS.append(p)
    return p


def stop(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out = p.stdout.read() if p.stdout else ""
    return out


def cleanup(wb):
    for p in PROCS:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    subprocess.run([wb, "testbed", "down", "--name", NAME],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def pin(cpu):
    """taskset prefix for one CPU (none when cpu is None)."""
    return [] if cpu is None else ["taskset", "-c", str(cpu)]


def path_limit(xdp_path, mode, secs, cpus, napi, by="live"):
    """frames/s the XDP sink on b saw while a flooded, by live frames or
    an AF_XDP ring (`by`; None on failure)."""
    sender_cpu, sink_cpu = cpus
    sink = start(ns(B, pin(sink_cpu) + [xdp_path, "sink", "eth0", "9000", mode,
                                        str(secs), napi]))
    time.sleep(0.5)
    how = (["live", "eth0", "10.0.1.1:9001", f"{DST4}:9000", str(SIZE), str(secs + 1),
            "65536"] if by == "live" else
           ["flood", "eth0", "10.0.1.1:9001", f"{DST4}:9000", str(SIZE), str(secs + 1)])
    rc, out = run(ns(A, pin(sender_cpu) + [xdp_path] + how), secs + 30)
    try:
        sink.wait(15)
    except subprocess.TimeoutExpired:
        pass
    text = stop(sink)
    if rc != 0:
        log(f"  flood failed: {out.strip()[-200:]}")
        return None
    for line in text.splitlines():
        if line.startswith("sink:"):
            # "sink: matched N frames in S s = R pps; received M = Q pps; ..."
            parts = line.split("=")
            matched = float(parts[1].split()[0])
            received = float(parts[2].split()[0])
            return matched if mode == "drop" else received
    log(f"  sink said: {text.strip()[-200:]}")
    return None


def wirebench(wb, port, args, secs, xdp, napi="auto", rx_how="ring"):
    """(delivered pps, loss, document) of one wirebench run (None on failure)."""
    rx = start(ns(B, [wb, "recv", "-q", "-p", str(port)]
                  + (["--xdp", "eth0", "--xdp-napi", napi, "--xdp-rx", rx_how] if xdp
                     else ["--no-xdp"])))
    time.sleep(0.8)
    out = tempfile.mktemp(prefix="wbxdp-", suffix=".json")
    argv = [wb, "send", "-a", DST4, "-4", "-p", str(port), "-c", str(SIZE),
            "-t", str(int(secs * 1000)), "--json", out] + args
    argv += ["--xdp", "eth0"] if xdp else ["--no-xdp"]
    rc, text = run(ns(A, argv), secs + 40)
    stop(rx)
    try:
        with open(out) as f:
            d = json.load(f)
        os.unlink(out)
    except (OSError, ValueError):
        log(f"  wirebench failed (rc {rc}): {text.strip()[-200:]}")
        return None
    fl = d["flows"][0]
    s, r = fl["sent"]["packets"], fl["received"]["packets"]
    dur = fl["sent"]["duration_s"] or 1e-9
    if xdp and not d["host"]["send_path"].startswith(("af_xdp", "xdp live frames")):
        log(f"  not the XDP path: {d['host']['send_path']}")
        return None
    return r / dur, (s - r) / max(s, 1), d


def iperf3(secs):
    srv = start(ns(B, ["iperf3", "-s", "-1", "-p", "5299"]))
    time.sleep(0.8)
    rc, text = run(ns(A, ["iperf3", "-c", DST4, "-p", "5299", "-u", "-b", "0",
                          "-l", str(SIZE), "-t", str(secs), "-J"]), secs + 30)
    stop(srv)
    try:
        s = json.loads(text)["end"]["sum"]
        return (s["packets"] - s["lost_packets"]) / s["seconds"], s["lost_percent"] / 100
    except (ValueError, KeyError):
        log(f"  iperf3 failed (rc {rc})")
        return None


def ditg(secs, workdir):
    recv = start(ns(B, ["ITGRecv"]))
    time.sleep(0.8)
    rlog = os.path.join(workdir, "itg-r.log")
    rc, text = run(ns(A, ["ITGSend", "-a", DST4, "-T", "UDP", "-C", "2000000",
                          "-c", str(SIZE), "-t", str(int(secs * 1000)),
                          "-x", rlog]), secs + 30)
    time.sleep(0.5)
    stop(recv)
    rc2, dec = run(["ITGDec", rlog], 60)
    pk = tm = None
    for line in dec.splitlines():
        if "Total packets" in line:
            pk = float(line.split("=")[1])
        if "Total time" in line:
            tm = float(line.split("=")[1].split()[0])
    if not pk or not tm:
        log(f"  D-ITG failed (rc {rc}/{rc2})")
        return None
    return pk / tm, None


def kpps(v):
    return "-" if v is None else f"{v / 1e3:.0f}"


def pctv(v):
    return "-" if v is None else f"{v * 100:.3f} %"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


ROWS = ("drop", "count", "xdp", "rec", "sock", "iperf3", "ditg", "paced")
# Rows that attach b's XDP program, so threaded NAPI reaches them.
XDP_ROWS = ("drop", "count", "xdp", "rec", "paced")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--xdp-path", default=None,
                    help="the xdp_path example binary (default: beside wirebench)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--rows", default=",".join(ROWS),
                    help=f"comma-separated rows to measure, of {','.join(ROWS)}")
    ap.add_argument("--napi", default="auto", choices=("auto", "off", "on", "both"),
                    help="threaded NAPI on b's eth0 for the XDP rows (both: off and "
                    "auto in turn in every repetition)")
    ap.add_argument("--paced", default="100000,1000000",
                    help="comma-separated rates of the paced row: packets/s, or F*max for F "
                    "times the --xdp --max rate of the same repetition and NAPI setting "
                    "(needs the rec or xdp row), e.g. 100000,0.9*max")
    ap.add_argument("--name", default=NAME, help="test-bed name")
    ap.add_argument("--limit-by", default="live", choices=("live", "ring"),
                    help="the path-limit rows' flood: live frames (default) or an AF_XDP ring")
    ap.add_argument("--sender-cpu", type=int, default=None,
                    help="CPU the path-limit flood is pinned to (default: the last; "
                    "the sink gets the one before it)")
    args = ap.parse_args()
    set_name(args.name)
    want = set(args.rows.split(","))
    if not want <= set(ROWS):
        print(f"--rows: unknown {','.join(sorted(want - set(ROWS)))} (rows: {','.join(ROWS)})")
        return 2
    settings = ["off", "auto"] if args.napi == "both" else [args.napi]
    rates = args.paced.split(",")
    for r in rates:
        try:
            float(r[:-4]) if r.endswith("*max") else int(r)
        except ValueError:
            print(f"--paced: {r!r} is no rate (packets/s, or F*max)")
            return 2
        if r.endswith("*max") and "xdp" not in want and "rec" not in want:
            print(f"--paced {r}: needs the rec or xdp row (--rows ...,rec)")
            return 2
    ncpu = os.cpu_count() or 1
    sender_cpu = ncpu - 1 if args.sender_cpu is None else args.sender_cpu
    cpus = (sender_cpu, (sender_cpu - 1) % ncpu if ncpu > 1 else None)
    wb = os.path.abspath(args.wirebench)
    xdp_path = args.xdp_path or os.path.join(os.path.dirname(wb), "examples", "xdp_path")
    if os.geteuid() != 0:
        print("xdp: needs root (network namespaces, XDP); left out")
        return 0
    if not os.access(xdp_path, os.X_OK):
        print(f"xdp: no {xdp_path} (cargo build --release -p wirebench-engine "
              "--example xdp_path); left out")
        return 0
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = tempfile.mkdtemp(prefix="wbxdp-")
    load0 = loadavg()
    # Per threaded-NAPI setting (XDP rows) or "" (the others).
    rows = {(k, n): [] for n in settings for k in ("drop", "count", "xdp", "rec")}
    rows.update({(k, ""): [] for k in ("sock", "iperf3", "ditg")})
    loss = {k: [] for k in rows}
    # --xdp: (sending host drops, receiving host drops) per run
    drops = {(k, n): [] for n in settings for k in ("xdp", "rec")}
    of_limit = {(k, n): [] for n in settings for k in ("xdp", "rec")}
    paced = {(r, n): [] for n in settings for r in rates}
    try:
        rc, out = run([wb, "testbed", "up", "direct", "--name", NAME], 120)
        if rc != 0:
            print(f"xdp: testbed up failed: {out.strip()[-300:]}")
            return 1
        # Neighbour entries for the flood (the sessions make their own).
        run(ns(A, ["bash", "-c", f"echo x > /dev/udp/{DST4}/9"]), 5)
        time.sleep(0.3)
        for rep in range(args.reps):
            log(f"xdp rep {rep + 1}/{args.reps}")
            for napi in settings:
                tag = f" [napi {napi}]" if len(settings) > 1 or napi != "auto" else ""
                for mode in ("drop", "count"):
                    if mode in want:
                        v = path_limit(xdp_path, mode, args.secs, cpus, napi, args.limit_by)
                        rows[(mode, napi)].append(v)
                        log(f"  path limit ({mode}){tag}: {kpps(v)} kpps, load {loadavg():.2f}")
                for row, how in (("xdp", "ring"), ("rec", "records")):
                    if row not in want:
                        continue
                    r = wirebench(wb, 15490 + rep, ["--max"], args.secs, True, napi, how)
                    rows[(row, napi)].append(r and r[0])
                    loss[(row, napi)].append(r and r[1])
                    if r:
                        d = r[2]
                        dr = drops[(row, napi)]
                        dr.append((d["total"]["sender_host_drops"],
                                   d["receiver"]["rcvbuf_errors"]))
                        line = (f"  {row}{tag}: {kpps(r[0])} kpps, loss {pctv(r[1])}, drops: "
                                f"sender host {dr[-1][0]}, receiver host {dr[-1][1]}")
                        lim = rows[("drop", napi)][-1] if rows[("drop", napi)] else None
                        if lim:
                            of_limit[(row, napi)].append(r[0] / lim)
                            line += f", {r[0] / lim:.2f} of this rep's limit"
                        log(line + f" ({d['receiver']['host']['rx_timestamps']}), "
                            f"load {loadavg():.2f}")
                for rate in rates if "paced" in want else ():
                    if rate.endswith("*max"):
                        tops = rows[("rec", napi)] or rows[("xdp", napi)]
                        top = tops[-1] if tops else None
                        if not top:
                            continue
                        pps = int(float(rate[:-4]) * top)
                    else:
                        pps = int(rate)
                    r = wirebench(wb, 15495 + rep, ["-C", str(pps)], args.secs, True, napi,
                                  rx_how="auto")
                    if r:
                        s = r[2]["flows"][0]["sent"]
                        paced[(rate, napi)].append(((s["rate_pps"] - pps) / pps,
                                                   s["schedule_error_s"]["p99"],
                                                   r[1], pps))
                        lim = rows[("drop", napi)][-1] if rows[("drop", napi)] else None
                        e, p99, l = paced[(rate, napi)][-1][:3]
                        log(f"  paced {pps / 1e3:.0f} kpps{tag}: rate error {e * 100:+.3f} %, "
                            f"schedule error p99 {p99 * 1e6:.0f} us, loss {l * 100:.2f} %, "
                            f"this rep's limit {kpps(lim)} kpps, load {loadavg():.2f}")
            if "sock" in want:
                r = wirebench(wb, 15480 + rep, ["--max"], args.secs, False)
                rows[("sock", "")].append(r and r[0])
                loss[("sock", "")].append(r and r[1])
                if r:
                    log(f"  sock: {kpps(r[0])} kpps, loss {pctv(r[1])}, load {loadavg():.2f}")
            if "iperf3" in want:
                r = iperf3(args.secs)
                rows[("iperf3", "")].append(r and r[0])
                loss[("iperf3", "")].append(r and r[1])
                log(f"  iperf3: {kpps(r and r[0])} kpps, load {loadavg():.2f}")
            if "ditg" in want:
                r = ditg(args.secs, workdir)
                rows[("ditg", "")].append(r and r[0])
                log(f"  D-ITG: {kpps(r and r[0])} kpps, load {loadavg():.2f}")
    finally:
        cleanup(wb)
    load1 = loadavg()
    print(f"\n64 B UDP on the direct test-bed (veth), medians of {args.reps}, "
          f"{args.secs:g} s runs; load average {load0:.2f} -> {load1:.2f}; "
          f"path-limit flood ({args.limit_by}) on CPU {cpus[0]}, sink on CPU {cpus[1]}")
    print(f"{'row':46} {'kpps':>7} {'loss':>9} {'of limit':>9}")
    names = [("drop", "path limit (XDP drop on b)"),
             ("count", "path limit (AF_XDP rx on b)"),
             ("xdp", "wirebench --xdp --max (rings)"),
             ("rec", "wirebench --xdp --max (records)"),
             ("sock", "wirebench socket path --max"),
             ("iperf3", "iperf3 -u -b 0 -l 64"),
             ("ditg", "D-ITG -C 2000000 -c 64")]
    for napi in settings:
        limit = med(rows[("drop", napi)])
        for k, label in names:
            key = (k, napi) if k in XDP_ROWS else (k, "")
            if key[1] == "" and napi != settings[-1]:
                continue
            v = med(rows[key])
            if key[1]:
                label += f", napi {napi}"
            of = "-" if v is None or not limit else f"{v / limit:.2f}"
            print(f"{label:46} {kpps(v):>7} {pctv(med(loss.get(key, []))):>9} {of:>9}")
    for napi in settings:
        x = med(rows[("xdp", napi)])
        s, i = med(rows[("sock", "")]), med(rows[("iperf3", "")])
        for row in ("xdp", "rec"):
            ol, dr = of_limit[(row, napi)], drops[(row, napi)]
            if ol:
                print(f"napi {napi}: {row} / XDP-drop limit of the same repetition: median "
                      f"{med(ol):.2f} ({', '.join(f'{v:.2f}' for v in ol)})")
            if dr:
                print(f"napi {napi}: {row} drops per run (sender host, receiver host): "
                      f"{', '.join(f'{a}/{b}' for a, b in dr)}")
        if x and s:
            print(f"napi {napi}: --xdp / socket path: {x / s:.2f}")
        if x and i:
            print(f"napi {napi}: --xdp / iperf3: {x / i:.2f}")
        for rate in rates:
            rs = paced[(rate, napi)]
            if rs:
                err, p99 = med([r[0] for r in rs]), med([r[1] for r in rs])
                ok = abs(err) <= 0.001 and p99 < 50e-6
                asked = ", ".join(f"{r[3] / 1e3:.0f}" for r in rs)
                print(f"napi {napi}: paced --xdp {rate} ({asked} kpps): rate error "
                      f"{err * 100:+.3f} %, schedule error p99 {p99 * 1e6:.0f} us, loss "
                      f"{med([r[2] for r in rs]) * 100:.2f} % (goal +-0.1 % and < 50 us: "
                      f"{'met' if ok else 'not met'}; load {load0:.2f} -> {load1:.2f})")
    if args.json:
        def keyed(d):
            return {f"{k[0]}/{k[1]}" if isinstance(k, tuple) else str(k): v
                    for k, v in d.items()}
        with open(args.json, "w") as f:
            json.dump({"rows": keyed(rows), "loss": keyed(loss), "of_limit": keyed(of_limit),
                       "drops": keyed(drops), "paced": keyed(paced), "load": [load0, load1]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
