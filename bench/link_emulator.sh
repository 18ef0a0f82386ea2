#!/usr/bin/env bash
# The test-bed's link backends (docs/testbed.md, "Link backends" and "How
# exact it is"): for each backend, frame size (70 B, the smallest frame
# wirebench sends: 24 B of probe header; and 1518 B) and link rate on a
# ladder, a UDP sender at `--max` for 2 s on the `direct` preset (one
# link) and the payload rate that arrives against the Ethernet model. A
# rate is held when the ratio is within 0.5 % (a sender held back by its
# own host queue offers about the link rate; one that could not fill the
# link says so, `sender-limited`, as does a receiver whose own socket
# dropped what the link delivered, `receiver-limited` (the loss split's
# `receiver_host`); the ladder stops there for that frame size: a higher
# rate could not be judged either). Then, for the emulator, 500 probes at a tenth of the
# link (at most 2 000/s) over the same link with a 10 ms delay, whose
# one-way delay minus the model (serialisation + 10 ms) is the emulator's
# added-delay error (p50/p99, from the run's own delay percentiles); and
# the emulator process's CPU time per Gbit/s carried (tbf's work is kernel
# softirq time that no process owns: not attributed). Sender and receiver
# run at SCHED_FIFO 50 (as the tests' real-time senders), so that on a
# shared machine the ladder measures the link more than the hosts' share
# of the CPU; the emulator runs at 70 (docs/testbed.md).
#
# Each emulator rung runs on two host paths (column `path`): `socket`, the
# hosts' UDP sockets, as a study runs; and `xdp`, sender and receiver on
# the AF_XDP path (`send --xdp eth0`, the receiver takes its half), so the
# hosts' stacks cost less and a small-frame rung measures the wire more
# than b's socket. The AF_XDP sender bypasses a's qdisc, so it is paced at
# 1.005 x the link's frame rate (not `--max`) and the emulator's own queue
# drops the excess. tbf rows are socket-path only (AF_XDP would bypass the
# tbf itself).
#
#   bench/link_emulator.sh [RATES...]   # default: 10mbit 50mbit 100mbit 200mbit 500mbit 1gbit
#   BACKENDS="emulator tbf" (default both); PATHS="socket xdp" (default
#   both; the emulator's); WIREBENCH=path to use a built
#   binary. Needs root. Runs its own test-bed `lkbench` and removes it on
#   exit. Backends are forced: the emulator with a 1 ns delay (it takes any
#   link with an impairment up to 1 Gbit/s), tbf alone with offloads on
#   (the emulator never takes a link with offloads).
set -euo pipefail
rates=("$@"); [[ ${#rates[@]} -gt 0 ]] || rates=(10mbit 50mbit 100mbit 200mbit 500mbit 1gbit)
read -r -a backends <<<"${BACKENDS:-emulator tbf}"
read -r -a paths <<<"${PATHS:-socket xdp}"
tb=lkbench; port=15981
. "$(dirname "${BASH_SOURCE[0]}")/link_common.sh"

up() { # backend rate delay
    local extra=()
    case $1 in
        emulator) extra=(--delay "$3") ;;
        tbf) extra=(--offloads on) ;;
    esac
    [[ -n "$recv_pid" ]] && kill "$recv_pid" 2>/dev/null || true
    "$wb" testbed up direct --name $tb --rate "$2" "${extra[@]}" >/dev/null
    "$wb" testbed exec --name $tb b -- chrt -f 50 "$wb" recv -p $port >/dev/null 2>&1 & recv_pid=$!
    sleep 1
}
cpu_ticks() { # total utime+stime of the emulator, 0 without one
    local pid; pid=$(ip netns pids "wb-$tb-_l0" 2>/dev/null | head -1)
    if [[ -n "$pid" ]]; then awk '{print $14 + $15}' "/proc/$pid/stat"; else echo 0; fi
}
send() { # out.json args...
    local out=$1; shift
    rm -f "$out"
    timeout 60 "$wb" testbed exec --name $tb a -- chrt -f 50 "$wb" send -a b -p $port -4 --json "$out" "$@" >/dev/null 2>&1
}

uptime
printf '%-8s %-6s %-8s %-6s %-10s %-10s %-10s %-8s %-15s %-12s %-9s %-9s\n' \
    backend path rate frame model_Mb sender_Mb got_Mb ratio verdict cpu_s/Gbit err_p50us err_p99us
for be in "${backends[@]}"; do
  for path in "${paths[@]}"; do
    [[ $be == tbf && $path == xdp ]] && continue
    for payload in 24 1472; do
        for r in "${rates[@]}"; do
            bps=$(python3 -c "
import re; m=re.fullmatch(r'([0-9.]+)(k|m|g)bit','$r'); print(int(float(m[1])*{'k':1e3,'m':1e6,'g':1e9}[m[2]]))")
            frame=$((payload + 28 + 14 + 4)); wire=$((payload + 28 + 14 + 24)); ((wire < 84)) && wire=84
            probe_pps=$(( bps / (wire * 8) / 10 )); ((probe_pps > 2000)) && probe_pps=2000
            load=(--max); via=()
            if [[ $path == xdp ]]; then
                load=(-C "$(( bps / (wire * 8) * 1005 / 1000 ))"); via=(--xdp eth0)
            fi
            up "$be" "$r" 1ns
            t0=$(cpu_ticks)
            send "$dir/sat.json" "${via[@]}" "${load[@]}" -c "$payload" -t 2000 || true
            t1=$(cpu_ticks)
            rm -f "$dir/lat.json"
            if [[ $be == emulator ]]; then
                up "$be" "$r" 10ms
                send "$dir/lat.json" "${via[@]}" -C "$probe_pps" -c "$payload" -z 500 || true
            fi
            verdict=$(python3 - "$dir/sat.json" "$dir/lat.json" "$bps" "$payload" "$wire" "$t0" "$t1" "$r" "$frame" "$be" "$path" <<'PY'
import json, os, sys
sat, lat, bps, payload, wire, t0, t1, rate, frame, be, path = sys.argv[1:]
bps, payload, wire = int(bps), int(payload), int(wire)
hz = os.sysconf("SC_CLK_TCK")
model = bps * payload / wire
try:
    f = json.load(open(sat))["flows"][0]
    got = f["throughput_bps"]["payload"]
    offered = f["sent"]["packets"] * payload * 8 / f["sent"]["duration_s"]
    rx_lost = f["loss_split"]["receiver_host"] / max(f["sent"]["packets"], 1)
    send_path = json.load(open(sat))["host"].get("send_path", "")
except Exception:
    got = offered = rx_lost = float("nan")
    send_path = ""
if path == "xdp" and "xdp" not in json.dumps(send_path).lower():
    print(f"warning: the xdp row ran on another path: {send_path}", file=sys.stderr)
ratio = got / model
if abs(ratio - 1) <= 0.005:
    verdict = "held"
elif rx_lost > 0.005:
    # Delivered to the receiving host, lost there (its socket buffer):
    # the link cannot be judged above this.
    verdict = "receiver-limited"
elif offered == offered and offered < model * 0.995:
    verdict = "sender-limited"
else:
    verdict = "not-held"
cpu = (int(t1) - int(t0)) / hz
carried_gbit = got / payload * wire * 8 * 2 / 1e9 if got == got else float("nan")
cpu_txt = f"{cpu / carried_gbit:.2f}" if be == "emulator" and carried_gbit else "-"
e50 = e99 = "-"
try:
    d = json.load(open(lat))["flows"][0]["delay_s"]
    ser = wire * 8 / bps
    e50 = f"{(d['p50'] - 0.010 - ser) * 1e6:.1f}"
    e99 = f"{(d['p99'] - 0.010 - ser) * 1e6:.1f}"
except Exception:
    pass
print(f"{be:<8} {path:<6} {rate:<8} {frame:<6} {model/1e6:<10.3f} {offered/1e6:<10.1f} {got/1e6:<10.3f} {ratio:<8.4f} "
      f"{verdict:<15} {cpu_txt:<12} {e50:<9} {e99:<9}", file=sys.stderr)
print(verdict)
PY
)
            # Above a rate the hosts could not fill or drain, nothing more
            # can be judged.
            [[ $verdict == sender-limited || $verdict == receiver-limited ]] && break
        done
    done
  done
done
uptime
