#!/usr/bin/env bash
# Where 60 bulk TCP flows lose packets on the 1 Gbit/s router test-bed, for
# iperf3 -P 60 and wirebench --flows 60 in the same run (issue #24, check
# K1): each tool's retransmits, the qdisc drops on every node (the largest
# count of its qdiscs: tbf and its pfifo child count the same drops; the
# sender's own tbf queue on `a` included), receive-side TCP drops on `b`, and from
# `ss -ti` at 3.5 s how long the flows had been busy sending (an
# application-limited sender keeps the queue short). Needs root and iperf3.
# Usage: bash bench/tcp_drop_sites.sh [path/to/wirebench]
set -euo pipefail
WB=${1:-target/release/wirebench}
TB=tcpdrop
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 2; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; "$WB" testbed down --name $TB >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$WB" testbed up router --name $TB --rate 1gbit --mtu 1500 >/dev/null
ns() { ip netns | awk '{print $1}' | grep -- "-$TB-$1\$"; }
A=$(ns a); B=$(ns b)
"$WB" testbed exec --name $TB b -- iperf3 -s -p 5441 >/dev/null 2>&1 & pids+=($!)
"$WB" testbed exec --name $TB b -- "$WB" recv -q -p 5442 >/dev/null 2>&1 & pids+=($!)
sleep 1
drops() {
  for n in $(ip netns | awk '{print $1}' | grep -- "-$TB-"); do
    ip netns exec "$n" tc -s qdisc | awk -v n="$n" '/dropped/ {gsub(/[(),]/,""); for (i=1;i<=NF;i++) if ($i=="dropped" && $(i+1)>s) s=$(i+1)} END {printf "%s qdisc drops %d; ", n, s}'
  done
  ip netns exec "$B" nstat -az TcpExtTCPRcvQDrop TcpExtPruneCalled TcpExtTCPOFODrop 2>/dev/null | awk 'NR>1 {printf "%s=%s ", $1, $2}'
  echo
}
busy() {
  python3 -c '
import re,sys,statistics as st
v=[float(x) for x in re.findall(r"\bbusy:(\d+)ms", sys.stdin.read())]
print(f"flows busy at 3.5 s: median {st.median(v):.0f} ms of 3500 ({len(v)} flows)" if v else "no busy figures")'
}
for tool in iperf3 wirebench; do
  before=$(drops)
  if [ $tool = iperf3 ]; then
    "$WB" testbed exec --name $TB a -- iperf3 -c b -p 5441 -P 60 -t 5 -J >/tmp/$TB-ip.json 2>/dev/null & run=$!; port=5441
  else
    "$WB" testbed exec --name $TB a -- "$WB" send -a b -p 5442 -4 -T tcp --max --flows 60 -c 8000 -t 5000 --json /tmp/$TB-wb.json >/dev/null 2>&1 & run=$!; port=5442
  fi
  sleep 3.5
  if [ $tool = iperf3 ]; then filt="( dport = :$port )"; else filt="( dport != :$port )"; fi
  b=$(ip netns exec "$A" ss -tin state established "$filt" | busy)
  wait $run
  echo "== $tool: $b"
  echo "   before: $before"
  echo "   after:  $(drops)"
done
python3 - <<PY
import json
ip=json.load(open('/tmp/$TB-ip.json')); wb=json.load(open('/tmp/$TB-wb.json'))
ipr=ip['end']['sum_received']['bits_per_second']/1e6; ipx=ip['end']['sum_sent'].get('retransmits',0)
wbr=wb['total']['throughput_bps']['payload']/1e6; wbx=sum(f.get('tcp',{}).get('retransmits',0) for f in wb['flows'])
print(f"iperf3 {ipr:.0f} Mbit/s, {ipx} retransmits; wirebench {wbr:.0f} Mbit/s, {wbx} retransmits; ratio {wbr/ipr:.3f}")
PY
rm -f /tmp/$TB-ip.json /tmp/$TB-wb.json
