#!/usr/bin/env bash
# What UDP GSO/GRO (issue 28) do to a 64 B --max flood: REPS rounds, each
# running wirebench with segmentation offload off (`send --gso off`,
# `recv --gro off`: the per-datagram path) and on (the defaults) back to
# back, on loopback beside iperf3 -u -b 0 -l 64 (check A3's commands) and
# on a `direct` test-bed (veth, offloads off: O1's socket-path half).
# Prints per run the delivered rate and loss, and the load average.
# Needs root and iperf3. Cleans up its receivers and test-bed on exit.
# Usage: bash bench/udp_gso.sh [wirebench] [REPS=3]
set -euo pipefail
WB=${1:-target/release/wirebench}; REPS=${2:-3}
WB=$(readlink -f "$WB")
TB=gsb$(( $$ % 1000 )); R=; IP=; OUT=$(mktemp -d)
cleanup() {
  if [ -n "$R" ]; then kill "$R" 2>/dev/null || true; fi
  if [ -n "$IP" ]; then kill "$IP" 2>/dev/null || true; fi
  wait 2>/dev/null || true
  "$WB" testbed down --name "$TB" >/dev/null 2>&1 || true
  rm -rf "$OUT"
}
trap cleanup EXIT INT TERM
# rate FILE: delivered kpps and loss of the flow in a result document
rate() {
  python3 -c "
import json,sys; f=json.load(open(sys.argv[1]))['flows'][0]; r=f['received']['packets']; s=f['sent']['packets']
print(f'{r/f[\"sent\"][\"duration_s\"]/1e3:.0f} kpps, loss {(s-r)/max(s,1)*100:.2f} %')" "$1"
}
flags() { if [ "$1" = off ]; then echo "$2"; fi; }
loopback() {
  local mode=$1
  "$WB" recv -p 15791 $(flags "$mode" "--gro off") >/dev/null 2>&1 & R=$!; sleep 1
  timeout 30 "$WB" send -a 127.0.0.1 -p 15791 -T udp --max -c 64 -t 3000 $(flags "$mode" "--gso off") \
    --json "$OUT/lo.json" >/dev/null 2>&1 || echo "send failed"
  kill "$R" 2>/dev/null || true; wait "$R" 2>/dev/null || true; R=
  echo "loopback gso/gro $mode: wirebench $(rate "$OUT/lo.json")"
}
iperf() {
  iperf3 -s -1 -p 15792 >/dev/null 2>&1 & IP=$!; sleep 1
  timeout 20 iperf3 -c 127.0.0.1 -p 15792 -u -b 0 -l 64 -t 3 -J 2>/dev/null | python3 -c "
import json,sys; s=json.load(sys.stdin)['end']['sum']; print(f'loopback iperf3: {(s[\"packets\"]-s[\"lost_packets\"])/s[\"seconds\"]/1e3:.0f} kpps')"
  wait "$IP" 2>/dev/null || true; IP=
}
bed() {
  local mode=$1
  # In b's namespace directly, so that $R is the receiver itself.
  ip netns exec "wb-$TB-b" "$WB" recv -p 15793 $(flags "$mode" "--gro off") >/dev/null 2>&1 & R=$!; sleep 1
  timeout 60 "$WB" testbed exec --name "$TB" a -- "$WB" send -a b -p 15793 -4 --max -c 64 -z 2000000 \
    $(flags "$mode" "--gso off") --json "$OUT/bed.json" >/dev/null 2>&1 || echo "send failed"
  kill "$R" 2>/dev/null || true; wait "$R" 2>/dev/null || true; R=
  echo "bed gso/gro $mode: wirebench $(rate "$OUT/bed.json")"
}
timeout 60 "$WB" testbed up direct --name "$TB" >/dev/null
for rep in $(seq "$REPS"); do
  echo "round $rep, load $(cut -d' ' -f1-3 /proc/loadavg)"
  loopback off; loopback on; iperf; bed off; bed on
done
