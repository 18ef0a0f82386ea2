#!/usr/bin/env bash
# Issue 23's throughput clauses on the test-bed's default backends: jumbo
# TCP at 1 Gbit/s (`direct`, MTU 9000: the wire emulator's, its frame rate
# is under EMULATOR_TIMING_MAX_FPS) within 0.3 % of the Ethernet bound,
# and UDP 1408 B at 100 Mbit/s over the `router` preset's two emulated
# hops within 0.1 %. RUNS runs of SECS s each (default 5 of 2 s for TCP,
# 3 s for UDP), sender and receiver at SCHED_FIFO 50; prints each run's
# payload / the result's own upper_bound_bps, the median and how many
# runs were within the clause, and per emulated hop the time its wire
# stood idle in short gaps (`idle_ns`, summed over the runs: a hop idle
# no longer than the hop before it lost no time of its own) and the
# emulator's mean send lateness. Quote it with the load (`uptime`).
#
#   bench/link_bounds.sh            RUNS=5; WIREBENCH=path to use a built binary;
#   CC=cubic|bbr for the TCP clause (default: the kernel's, named in its line;
#   BBR's pacing runs in softirq work that real-time tasks can hold off:
#   docs/testbed.md)
# Needs root. Runs its own test-bed `lkbounds` and removes it on exit.
set -euo pipefail
runs=${RUNS:-5}
tb=lkbounds; port=15985
. "$(dirname "${BASH_SOURCE[0]}")/link_common.sh"

# bound PRESET UP_OPTS LIMIT SEND_OPTS...: one bed, RUNS sends, a verdict line.
bound() {
    local preset=$1 up=$2 limit=$3; shift 3
    # shellcheck disable=SC2086 # up is a list of options
    "$wb" testbed up "$preset" --name $tb $up >/dev/null
    "$wb" testbed exec --name $tb b -- chrt -f 50 "$wb" recv -p $port >/dev/null 2>&1 & recv_pid=$!
    sleep 1
    : >"$dir/ratios"
    "$wb" testbed status --name $tb --counters --json >"$dir/before.json"
    for _ in $(seq 1 "$runs"); do
        rm -f "$dir/r.json"
        timeout 60 "$wb" testbed exec --name $tb a -- chrt -f 50 "$wb" send -a b -p $port -4 \
            "$@" --json "$dir/r.json" >/dev/null 2>&1 || true
        python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["total"]; print("%.5f" % (t["throughput_bps"]["payload"] / t["upper_bound_bps"]))' \
            "$dir/r.json" >>"$dir/ratios" 2>/dev/null || echo nan >>"$dir/ratios"
    done
    "$wb" testbed status --name $tb --counters --json >"$dir/after.json"
    kill "$recv_pid" 2>/dev/null || true; wait "$recv_pid" 2>/dev/null || true; recv_pid=""
    "$wb" testbed down --name $tb >/dev/null
    python3 - "$dir/ratios" "$limit" "$preset $up: $*" "$dir/before.json" "$dir/after.json" <<'PY'
import json, math, statistics, sys
xs = [float(l) for l in open(sys.argv[1])]
before = json.load(open(sys.argv[4]))["wire_counters"]
after = json.load(open(sys.argv[5]))["wire_counters"]
hops = []
for i, (b, a) in enumerate(zip(before, after)):
    if not (a and b) or "idle_ns" not in a[0]:
        continue  # no emulator on this link, or one without these counters
    d = {k: a[0].get(k, 0) - b[0].get(k, 0) for k in ("idle_ns", "late_ns", "timed")}
    late = d["late_ns"] / max(d["timed"], 1) / 1e3
    hops.append(f"hop {i + 1} idle {d['idle_ns'] / 1e6:.2f} ms, sent late {late:.1f} us mean")
ok = [x for x in xs if not math.isnan(x)]
lim = float(sys.argv[2])
print(f"{sys.argv[3]}\n  payload / bound per run: {' '.join(f'{x:.4f}' for x in xs)}; "
      f"median {statistics.median(ok):.4f}; within {lim:.1%}: "
      f"{sum(abs(x - 1) <= lim for x in ok)} of {len(xs)}")
if hops:
    print("  " + "; ".join(hops))
PY
}

uptime
if [[ -n ${CC:-} ]]; then
    echo "TCP congestion control: $CC"
else
    echo "TCP congestion control: $(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo '?'), the kernel's default"
fi
bound direct "--mtu 9000 --rate 1gbit" 0.003 -T tcp ${CC:+--cc "$CC"} --max -t 2000 --link-rate 1gbit
bound router "--rate 100mbit" 0.001 -T udp --max -c 1408 -t 3000 --link-rate 100mbit
uptime
