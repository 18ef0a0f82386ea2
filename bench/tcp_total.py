#!/usr/bin/env python3
"""One bulk TCP session's total and retransmits, from iperf3 -J or
wirebench --json, on one line without its newline (the shell scripts
beside it append their drop counters):

    python3 bench/tcp_total.py iperf3|wirebench FILE.json
"""
import json
import sys

if len(sys.argv) != 3 or sys.argv[1] not in ("iperf3", "wirebench"):
    sys.exit("usage: tcp_total.py iperf3|wirebench FILE.json")
try:
    d = json.load(open(sys.argv[2]))
    if sys.argv[1] == "iperf3":
        e = d["end"]
        bps = e["sum_received"]["bits_per_second"]
        rtx = e["sum_sent"].get("retransmits", 0)
    else:
        bps = d["total"]["throughput_bps"]["payload"]
        rtx = sum(f.get("tcp", {}).get("retransmits", 0) for f in d["flows"])
except (OSError, ValueError, KeyError, TypeError) as e:
    print(f"{sys.argv[1]:9} no result ({sys.argv[2]}: {e})", end="")
    sys.exit(0)
print(f"{sys.argv[1]:9} {bps / 1e6:6.1f} Mbit/s, retransmits {rtx:6d}", end="")
