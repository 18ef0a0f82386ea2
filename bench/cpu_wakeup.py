#!/usr/bin/env python3
"""How late a sleeping real-time task wakes, with and without a CPU latency
request held (docs/testbed.md, "The slack and the CPUs' sleep").

The link emulator naps in `ppoll` once its spin budget is spent and holds
a 0 us request in /dev/cpu_dma_latency while its link carries frames; this
bench measures what that request buys on the machine it runs on. Each
round sleeps N times for 100 us to an absolute CLOCK_MONOTONIC deadline at
SCHED_FIFO 80 with 1 ns timer slack (as the emulator), first with no
request ("halted": the CPUs may enter any idle state), then with 0 us held
("polling"), and prints the lateness quantiles of each. The loop is
Python calling clock_nanosleep through ctypes, so both columns carry the
same few us of interpreter overhead: read the difference, not the floor.
Needs root (real-time priority, the QoS device).

    bench/cpu_wakeup.py [--rounds 3] [--sleeps 20000]
"""
import argparse
import ctypes
import os
import struct
import sys
import time

CLOCK_MONOTONIC = 1
TIMER_ABSTIME = 1
PR_SET_TIMERSLACK = 29


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def lateness(libc, n, period_ns):
    ts = Timespec()
    late = []
    t = time.monotonic_ns()
    for _ in range(n):
        t += period_ns
        ts.tv_sec, ts.tv_nsec = divmod(t, 1_000_000_000)
        libc.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, ctypes.byref(ts), None)
        late.append(time.monotonic_ns() - t)
    late.sort()
    return [late[int(q * (n - 1))] / 1e3 for q in (0.5, 0.9, 0.99)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sleeps", type=int, default=20000)
    args = ap.parse_args()
    if not 1 <= args.rounds <= 20 or not 1000 <= args.sleeps <= 200000:
        ap.error("--rounds 1..20, --sleeps 1000..200000")
    if os.geteuid() != 0:
        sys.exit("needs root: SCHED_FIFO and /dev/cpu_dma_latency")
    libc = ctypes.CDLL(None, use_errno=True)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(80))
    libc.prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(1), 0, 0, 0)
    try:
        drv = open("/sys/devices/system/cpu/cpuidle/current_driver").read().strip()
    except OSError:
        drv = "none"
    print(f"cpuidle driver {drv}; {args.sleeps} sleeps of 100 us per cell; "
          f"lateness p50 / p90 / p99 (us)")
    for r in range(args.rounds):
        cells = []
        for held in (False, True):
            fd = None
            if held:
                fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
                os.write(fd, struct.pack("i", 0))
            time.sleep(0.5)
            cells.append(lateness(libc, args.sleeps, 100_000))
            if fd is not None:
                os.close(fd)  # the kernel drops the request with the fd
        (h, p) = cells
        print(f"round {r + 1}: halted {h[0]:.1f} / {h[1]:.1f} / {h[2]:.1f}   "
              f"polling {p[0]:.1f} / {p[1]:.1f} / {p[2]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
