#!/usr/bin/env python3
"""Check O1's own commands on the `direct` test-bed (root), repeated under
each receive-side threaded-NAPI setting, to decide and document `recv
--xdp-napi`'s default (docs/engine.md, "Threaded NAPI").

Per repetition and per --napi setting (interleaved, so load drifts hit
every setting alike), on a fresh bed:
  socket   `recv` in b, `send --max -c 64 -z --sock-packets` in a (O1's
           baseline)
  xdp      `recv --xdp eth0 --xdp-napi S` in b, `send --xdp eth0 --max -c
           64 -z --xdp-packets --xdp-txq T` in a (O1's run)
  sock>xdp `recv --xdp eth0 --xdp-napi S` in b, a socket-path sender
           (`send --max -c 64 -z --sock-packets`, no --xdp) in a: what a
           receiver's setting costs a sender that has no sending queue
Each run prints delivered kpps (received / the sender's duration), loss
(sent - received) / sent, the sending host's drops (total.sender_host_drops)
and the load average it ran under; the end prints medians per row and the
xdp / socket ratio of each repetition, against O1's goals (ratio >= 2,
>= 1490 kpps, loss < 0.1 %).

  bench/xdp_o1.py --wirebench target/release/wirebench --reps 5 --napi off,auto

The bed (--name, default xqo1) and every process started here are removed
at the end, also on Ctrl-C.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def wb_exec(wb, bed, node, argv, **kw):
    return [wb, "testbed", "exec", "--name", bed, node, "--", wb] + argv


def load():
    return os.getloadavg()[0]


def one(wb, bed, port, recv_args, send_args, tmp):
    """Runs one receiver/sender pair; returns (kpps, loss, sender_host_drops)."""
    out = os.path.join(tmp, f"{port}.json")
    r = subprocess.Popen(wb_exec(wb, bed, "b", ["recv", "-q", "-p", str(port)] + recv_args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(50):
            ss = subprocess.run(["ip", "netns", "exec", f"wb-{bed}-b", "ss", "-Htln"],
                                capture_output=True, text=True).stdout
            if f":{port}" in ss:
                break
            subprocess.run(["sleep", "0.1"])
        s = subprocess.run(wb_exec(wb, bed, "a", ["send", "-a", "b", "-p", str(port), "-4",
                                                  "--json", out] + send_args),
                           capture_output=True, text=True, timeout=120)
        if s.returncode != 0:
            print(f"  send failed: {s.stderr.strip()[-300:]}", file=sys.stderr)
            return None
        d = json.load(open(out))
        f = d["flows"][0]
        sent, got = f["sent"]["packets"], f["received"]["packets"]
        return (got / f["sent"]["duration_s"] / 1e3, (sent - got) / sent,
                d["total"].get("sender_host_drops", 0), d["host"]["send_path"],
                d["receiver"]["host"]["rx_timestamps"])
    finally:
        r.terminate()
        try:
            r.wait(timeout=10)
        except subprocess.TimeoutExpired:
            r.kill()
            r.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--napi", default="off,auto", help="comma-separated --xdp-napi settings")
    ap.add_argument("--txq", default="auto", choices=("auto", "keep"), help="send --xdp-txq")
    ap.add_argument("--rows", default="socket,xdp,sock>xdp")
    ap.add_argument("--sock-packets", type=int, default=2_000_000)
    ap.add_argument("--xdp-packets", type=int, default=5_000_000)
    ap.add_argument("--name", default="xqo1")
    args = ap.parse_args()
    wb, bed = os.path.abspath(args.wirebench), args.name
    rows = args.rows.split(",")
    settings = args.napi.split(",")
    res = {}
    tmp = tempfile.mkdtemp(prefix="xdp_o1.")
    port = 15600
    try:
        for rep in range(args.reps):
            subprocess.run([wb, "testbed", "down", "--name", bed], capture_output=True)
            up = subprocess.run([wb, "testbed", "up", "direct", "--name", bed],
                                capture_output=True, text=True, timeout=60)
            if up.returncode != 0:
                sys.exit(f"testbed up: {up.stderr}")
            runs = []
            if "socket" in rows:
                runs.append(("socket", None, [], []))
            for s in settings:
                napi = ["--xdp", "eth0", "--xdp-napi", s]
                if "xdp" in rows:
                    runs.append(("xdp", s, napi, ["--xdp", "eth0", "--xdp-txq", args.txq,
                                                  "--max", "-c", "64", "-z",
                                                  str(args.xdp_packets)]))
                if "sock>xdp" in rows:
                    runs.append(("sock>xdp", s, napi, []))
            for row, s, recv_args, send_args in runs:
                if not send_args:
                    send_args = ["--max", "-c", "64", "-z", str(args.sock_packets)]
                port += 1
                la = load()
                r = one(wb, bed, port, recv_args, send_args, tmp)
                key = (row, s)
                res.setdefault(key, []).append(r)
                tag = f"{row}" + (f" [napi {s}]" if s else "")
                if r:
                    print(f"rep {rep + 1} {tag}: {r[0]:.0f} kpps, loss {r[1] * 100:.3f} %, "
                          f"sender host drops {r[2]}, load {la:.2f}\n    send: {r[3]}\n"
                          f"    recv: {r[4]}", flush=True)
    finally:
        subprocess.run([wb, "testbed", "down", "--name", bed], capture_output=True)
    print("\nmedians (runs that ended):")
    sock = res.get(("socket", None), [])
    for key, rs in res.items():
        ok = [r for r in rs if r]
        if not ok:
            continue
        kpps = statistics.median(r[0] for r in ok)
        loss = [r[1] * 100 for r in ok]
        line = (f"  {key[0]}{' [napi ' + key[1] + ']' if key[1] else ''}: {kpps:.0f} kpps "
                f"(min {min(r[0] for r in ok):.0f}, max {max(r[0] for r in ok):.0f}), "
                f"loss median {statistics.median(loss):.3f} % max {max(loss):.3f} %, "
                f"runs with loss >= 0.1 %: {sum(x >= 0.1 for x in loss)} of {len(ok)}")
        if key[0] == "xdp" and sock:
            ratios = [x[0] / s[0] for x, s in zip(rs, sock) if x and s]
            if ratios:
                line += f"; ratio to socket median {statistics.median(ratios):.2f} " \
                        f"({', '.join(f'{q:.2f}' for q in ratios)})"
        print(line)


if __name__ == "__main__":
    main()
