#!/usr/bin/env bash
# The user-space wire emulator of the test-bed (docs/testbed.md, "Link
# backends"): for each link rate and frame size (70 B, the smallest frame
# wirebench sends: 24 B of probe header; and 1518 B), a UDP sender at
# `--max` for 2 s on the `direct` preset (one emulated link) and the
# payload rate that arrives against the Ethernet model (a ratio well below
# 1 with a sender that could not fill the link says so: `sender_Mb`); then
# 500 probes at a tenth of the link over the same link with a 10 ms delay,
# whose one-way delay minus
# the model (serialisation + 10 ms) is the emulator's added-delay error
# (p50/p99, from the run's own delay percentiles); and the emulator
# process's CPU time per Gbit/s carried.
#
#   bench/link_emulator.sh [RATES...]   # default: 10mbit 100mbit 1gbit
#   WIREBENCH=path to use a built binary. Needs root. Runs its own test-bed
#   `lkbench` and removes it on exit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wb="${WIREBENCH:-${CARGO_TARGET_DIR:-$root/target}/release/wirebench}"
[[ -x "$wb" ]] || (cd "$root" && cargo build --release -q -p wirebench)
rates=("$@"); [[ ${#rates[@]} -gt 0 ]] || rates=(10mbit 100mbit 1gbit)
tb=lkbench; port=15981; dir="$(mktemp -d /tmp/wirebench-linkemu.XXXXXX)"
recv_pid=""
cleanup() {
    [[ -n "$recv_pid" ]] && kill "$recv_pid" 2>/dev/null || true
    "$wb" testbed down --name $tb >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

up() { # rate [delay]
    local extra=(); [[ -n "${2:-}" ]] && extra=(--delay "$2")
    [[ -n "$recv_pid" ]] && kill "$recv_pid" 2>/dev/null || true
    "$wb" testbed up direct --name $tb --rate "$1" "${extra[@]}" >/dev/null
    "$wb" testbed exec --name $tb b -- "$wb" recv -p $port >/dev/null 2>&1 & recv_pid=$!
    sleep 1
}
cpu_ticks() { # total utime+stime of the emulator
    local pid; pid=$(ip netns pids "wb-$tb-_l0" | head -1)
    awk '{print $14 + $15}' "/proc/$pid/stat"
}
send() { # out.json args...
    local out=$1; shift
    rm -f "$out"
    timeout 60 "$wb" testbed exec --name $tb a -- "$wb" send -a b -p $port -4 --json "$out" "$@" >/dev/null 2>&1
}

printf '%-8s %-6s %-10s %-10s %-10s %-8s %-12s %-9s %-9s\n' rate frame model_Mb sender_Mb got_Mb ratio cpu_s/Gbit err_p50us err_p99us
for r in "${rates[@]}"; do
    bps=$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)(k|m|g)bit','$r'); print(int(float(m[1])*{'k':1e3,'m':1e6,'g':1e9}[m[2]]))")
    for payload in 24 1472; do
        frame=$((payload + 28 + 14 + 4)); wire=$((payload + 28 + 14 + 24)); ((wire < 84)) && wire=84
        probe_pps=$(( bps / (wire * 8) / 10 )); ((probe_pps > 2000)) && probe_pps=2000
        up "$r"
        t0=$(cpu_ticks)
        send "$dir/sat.json" --max -c "$payload" -t 2000 || true
        t1=$(cpu_ticks)
        up "$r" 10ms
        send "$dir/lat.json" -C "$probe_pps" -c "$payload" -z 500 || true
        python3 - "$dir/sat.json" "$dir/lat.json" "$bps" "$payload" "$wire" "$t0" "$t1" "$r" "$frame" <<'PY'
import json, os, sys
sat, lat, bps, payload, wire, t0, t1, rate, frame = sys.argv[1:]
bps, payload, wire = int(bps), int(payload), int(wire)
hz = os.sysconf("SC_CLK_TCK")
model = bps * payload / wire
try:
    f = json.load(open(sat))["flows"][0]
    got = f["throughput_bps"]["payload"]
    offered = f["sent"]["packets"] * payload * 8 / f["sent"]["duration_s"]
except Exception:
    got = offered = float("nan")
cpu = (int(t1) - int(t0)) / hz
carried_gbit = got / payload * wire * 8 * 2 / 1e9 if got == got else float("nan")
try:
    d = json.load(open(lat))["flows"][0]["delay_s"]
    ser = wire * 8 / bps
    e50 = (d["p50"] - 0.010 - ser) * 1e6
    e99 = (d["p99"] - 0.010 - ser) * 1e6
except Exception:
    e50 = e99 = float("nan")
print(f"{rate:<8} {frame:<6} {model/1e6:<10.3f} {offered/1e6:<10.1f} {got/1e6:<10.3f} {got/model:<8.4f} "
      f"{cpu/carried_gbit if carried_gbit else float('nan'):<12.2f} {e50:<9.1f} {e99:<9.1f}")
PY
    done
done
