#!/usr/bin/env python3
"""Many flows in one session on loopback: wirebench's shared pacers and
receive workers against a thread per flow, in the same run.

Each case runs `wirebench send --flows N -C PPS -c 64` against a
`wirebench recv` started here (own process group, killed at the end), once
per pacing mode, interleaved over --reps repetitions, and reads the result
documents:

  - rate error: every flow's sent and received rate against the requested
    one (worst flow, as a fraction);
  - loss: lost + not_sent over all flows (must be 0);
  - schedule error p99: each flow's `sent.schedule_error_s.p99`; the median
    and the worst flow;
  - start: wall time from launching `send` until the document's `started`
    instant (handshake, N sockets each side, Ready);
  - wall: the whole `send`, launch to exit (start, run, linger and the
    stop that ends every flow at once), so a slow teardown shows here;
  - memory per flow: the sender's peak RSS over that of a one-flow
    session (run first, same options; median of three), and the
    receiver's peak RSS growth
    during the session, each divided by N. Both peaks include the end of
    the session (the receiver's report, the result document), not only
    the flows' running state. Peaks are the kernel's exact high-water
    marks where it gives them (the sender's through GNU time's %M, the
    receiver's VmHWM restarted before each session), else samples every
    50 ms, which can miss a peak as short as the end of a session. RSS
    counts user memory only: socket buffers are kernel memory and do not
    show here.

With --rt the sender runs under `chrt -f 50` (root): the pacer then is not
preempted by ordinary load, which is the only way to read its own timing on
a shared host. All traffic goes to 127.0.0.1.

With --host-latency every trial also runs `cyclictest` (Debian package
`rt-tests`) beside the sender for the whole session: one SCHED_FIFO thread
at priority 60, above the sender's 50, that sleeps to an absolute deadline
every 500 us and records how late it woke. It does nothing else, so what it
sees is what the host (interrupts, softirqs, the hypervisor taking the
virtual CPU) did to the most favoured thread while the session ran: a floor
for any pacer's schedule error. The trial also records the CPU steal time
(/proc/stat) over its span. Both are printed beside the pacer's figures.
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import HostLatency, rss_kib, tcp_listening  # noqa: E402

CASES = {
    "60x2000": (60, 2000.0),
    "128x100": (128, 100.0),
    "1000x100": (1000, 100.0),
    "10000x10": (10000, 10.0),
}


def gnu_time():
    """Path of GNU time (prints a child's peak RSS as %M), or None."""
    path = shutil.which("time") or "/usr/bin/time"
    try:
        out = subprocess.run([path, "--version"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if "GNU" in out.stdout + out.stderr else None


GNU_TIME = gnu_time()


def reset_hwm(pid):
    """Restarts a process's peak RSS from its current RSS (Linux >= 4.0,
    own process or root); False where that is not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def one(args, wb, port, n, pps, pacers, workdir, rx, tx_base_kib=0):
    out = os.path.join(workdir, f"doc-{n}-{pacers.replace(':', '-')}.json")
    # A mode is PACERS[:PHASES], e.g. "auto", "flow:aligned".
    pacers_arg, _, phases = pacers.partition(":")
    argv = [wb, "send", "-a", "127.0.0.1", "-p", str(port), "--flows", str(n),
            "-C", str(pps), "-c", "64", "-t", str(int(args.secs * 1000)),
            "--linger", str(args.linger_ms), "--pacers", pacers_arg, "--json", out]
    if phases:
        argv += ["--phases", phases]
    if args.rt:
        argv = ["chrt", "-f", "50"] + argv
    # The sender's exact peak RSS: GNU time's %M (wait4's ru_maxrss). Its
    # own small process forks the sender; wait4 from here would also count
    # this interpreter, whose pages a forked child maps until it execs.
    maxrss = os.path.join(workdir, "maxrss")
    if GNU_TIME:
        argv = [GNU_TIME, "-f", "%M", "-o", maxrss, "--"] + argv
    rx_before = rss_kib(rx.pid)
    monitor = None
    if args.host_latency:
        monitor = HostLatency(args.secs + 1.0 + args.linger_ms / 1000.0)
    # The receiver's high-water mark restarts from its current RSS, so that
    # after the session it is the session's exact peak.
    rx_hwm = reset_hwm(rx.pid)
    launched = time.time()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    peak_rx = rx_before
    peak_tx = 0
    while p.poll() is None:
        peak_rx = max(peak_rx, rss_kib(rx.pid))
        if not GNU_TIME:
            peak_tx = max(peak_tx, rss_kib(p.pid))
        time.sleep(0.05)
    wall_s = time.time() - launched
    host = monitor.finish() if monitor else {}
    if rx_hwm:
        peak_rx = max(peak_rx, rss_kib(rx.pid, "VmHWM"))
    if GNU_TIME:
        try:
            with open(maxrss) as f:
                peak_tx = int(f.read().split()[-1])
            os.unlink(maxrss)
        except (OSError, ValueError, IndexError):
            raise RuntimeError("time -f %M wrote no peak RSS")
    err = p.stderr.read().decode(errors="replace")
    if p.returncode not in (0, 1) or not os.path.exists(out):
        raise RuntimeError(f"send failed ({p.returncode}): {err[-500:]}")
    with open(out) as f:
        doc = json.load(f)
    os.unlink(out)
    flows = doc["flows"]
    worst_rate = 0.0
    p99s = []
    lost = 0
    for fl in flows:
        for r in (fl["sent"]["rate_pps"], fl["received"].get("packets", 0)
                  / max(fl["sent"]["duration_s"], 1e-9)):
            worst_rate = max(worst_rate, abs(r / pps - 1.0))
        p99s.append(fl["sent"]["schedule_error_s"]["p99"])
        # null: the receiver's report is missing (then "partial" says so).
        lost += (fl["received"].get("lost") or 0) + fl["sent"]["not_sent"]
    start_s = None
    try:
        started = datetime.datetime.fromisoformat(
            doc["started_at"].replace("Z", "+00:00")).timestamp()
        start_s = started - launched
    except (KeyError, ValueError):
        pass
    res = {
        "pacers": pacers,
        "flows": len(flows),
        "rate_err_worst": worst_rate,
        "lost": lost,
        "p99_median_us": statistics.median(p99s) * 1e6,
        "p99_worst_us": max(p99s) * 1e6,
        "start_s": start_s,
        "wall_s": wall_s,
        "rx_rss_kib_per_flow": (peak_rx - rx_before) / n,
        "tx_peak_kib": peak_tx,
        "tx_rss_kib_per_flow": (peak_tx - tx_base_kib) / n,
        "partial": doc.get("partial", False),
    }
    res.update(host)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wirebench", required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--modes", default="auto,flow",
                    help="PACERS[:PHASES] per trial, comma-separated "
                    "(e.g. auto,auto:aligned,flow)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--secs", type=float, default=5.0)
    ap.add_argument("--port", type=int, default=15470)
    ap.add_argument("--linger-ms", type=int, default=2000,
                    help="send --linger; 0 makes the wall column start + run "
                    "+ teardown")
    ap.add_argument("--rt", action="store_true",
                    help="run the sender under chrt -f 50 (root)")
    ap.add_argument("--host-latency", action="store_true",
                    help="run cyclictest (rt-tests) at SCHED_FIFO 60 beside "
                    "every trial and record the steal time: the host's own "
                    "wake-up latency floor next to the pacer's figures")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.rt and not shutil.which("chrt"):
        sys.exit("many_flows: chrt not found")
    if args.host_latency and not shutil.which("cyclictest"):
        sys.exit("many_flows: --host-latency needs cyclictest "
                 "(apt-get install rt-tests)")
    workdir = tempfile.mkdtemp(prefix="wb-many-")
    rx = subprocess.Popen([args.wirebench, "recv", "-p", str(args.port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    results = []
    try:
        deadline = time.monotonic() + 5
        while not tcp_listening(args.port):
            if rx.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("receiver did not start")
            time.sleep(0.05)
        # The sender's fixed memory (binary, threads, one flow): the median
        # of three one-flow sessions. One alone varies by up to ~500 KiB
        # from run to run (which pages of the binary a session happens to
        # touch), 8 KiB per flow at 60 flows.
        base = statistics.median(
            one(args, args.wirebench, args.port, 1, 100.0, "auto", workdir,
                rx)["tx_peak_kib"] for _ in range(3))
        for case in args.cases.split(","):
            n, pps = CASES[case]
            for rep in range(args.reps):
                for mode in args.modes.split(","):
                    r = one(args, args.wirebench, args.port, n, pps, mode,
                            workdir, rx, base)
                    r.update(case=case, rep=rep)
                    results.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        try:
            os.killpg(rx.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        rx.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nhost {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} after; sender "
          f"{'under chrt -f 50' if args.rt else 'at normal priority'}; "
          f"KiB/flow: sender peak RSS over a 1-flow session's ({base} KiB), "
          f"receiver RSS growth")
    print("case       pacers  rate err worst  lost  sched p99 median / worst (us)"
          "  start (s)  wall (s)  KiB/flow tx rx")
    for case in args.cases.split(","):
        for mode in args.modes.split(","):
            rs = [r for r in results if r["case"] == case and r["pacers"] == mode]
            if not rs:
                continue
            med = lambda k: statistics.median(r[k] for r in rs)
            starts = [r["start_s"] for r in rs if r["start_s"] is not None]
            print(f"{case:10} {mode:6} {max(r['rate_err_worst'] for r in rs):14.5%}"
                  f" {sum(r['lost'] for r in rs):5d}"
                  f" {med('p99_median_us'):10.1f} / {med('p99_worst_us'):9.1f}"
                  f" {statistics.median(starts) if starts else float('nan'):10.3f}"
                  f" {med('wall_s'):9.2f}"
                  f" {med('tx_rss_kib_per_flow'):7.1f} {med('rx_rss_kib_per_flow'):5.1f}")
    if args.host_latency:
        print("\nper trial: pacer p99 (median over flows) beside the host: "
              "cyclictest at FIFO 60, 500 us period, p99 / max, share of "
              "wake-ups > 50 us, wake-ups > 1 ms; CPU steal")
        print("case       pacers  rep  pacer p99 (us)  host p99 / max (us)"
              "  host > 50 us  > 1 ms  steal (ms)")
        for r in results:
            print(f"{r['case']:10} {r['pacers']:6} {r['rep']:4d}"
                  f" {r['p99_median_us']:15.1f}"
                  f" {r['host_p99_us']:9d} / {r['host_max_us']:6d}"
                  f" {r['host_over_50us']:12.2%} {r['host_over_1ms']:7d}"
                  f" {r['steal_ms']:10.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
