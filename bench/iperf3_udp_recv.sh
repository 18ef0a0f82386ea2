#!/usr/bin/env bash
# The iperf3 server's UDP receive path (`wirebench recv --iperf3`) under
# `iperf3 -u -b 0 -l 64 -t 4`, two wirebench binaries alternated in one run
# (e.g. before and after a change): datagrams the client's JSON says
# arrived, the share lost, and the receiver's CPU time (utime + stime from
# /proc) per 1000 datagrams. Quote medians and the load average printed.
# Needs iperf3. Usage: bash bench/iperf3_udp_recv.sh BIN_A BIN_B [ROUNDS]
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-5}
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 2; }
PORT=15480
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
one() {
  local bin=$1 out
  out=$(mktemp)
  "$bin" recv -q -B 127.0.0.1 -p $((PORT + 1)) --iperf3 $PORT & pid=$!
  sleep 1
  local c0 c1
  c0=$(awk '{print $14 + $15}' /proc/$pid/stat)
  timeout 30 iperf3 -c 127.0.0.1 -p $PORT -u -b 0 -l 64 -t 4 -J >"$out"
  sleep 0.3
  c1=$(awk '{print $14 + $15}' /proc/$pid/stat)
  kill $pid; wait $pid 2>/dev/null || true; pid=
  python3 - "$out" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))['end']
r = e.get('sum_received', e.get('sum'))
got = r['packets'] - r['lost_packets']
cpu_s = (float(sys.argv[3]) - float(sys.argv[2])) / float(sys.argv[4])
print(f"{got} datagrams, lost {100 * r['lost_packets'] / max(1, r['packets']):.1f} %, "
      f"receiver CPU {cpu_s * 1e6 / max(1, got) * 1000:.0f} us per 1000 datagrams")
PY
  rm -f "$out"
}
uptime
for i in $(seq 1 "$ROUNDS"); do
  echo "A: $(one "$A")"
  echo "B: $(one "$B")"
done
uptime
