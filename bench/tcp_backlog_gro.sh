#!/usr/bin/env bash
# Does the host's per-CPU backlog cause check K1's loss episodes (issue #24)?
# On a bed like K1's (router preset, 1 Gbit/s, MTU 1500) runs PAIRS pairs of
# iperf3 -P 60 then wirebench --flows 60 (5 s each) as built, then the same
# with GRO switched on at every veth of the bed (veth then queues in its own
# NAPI ring and never in the backlog), and prints per run the throughput,
# the retransmits, the host's backlog drops (/proc/net/softnet_stat, second
# column) and the drops of node a's own qdisc. Needs root and iperf3.
# Usage: bash bench/tcp_backlog_gro.sh [path/to/wirebench] [PAIRS=3]
set -euo pipefail
WB=${1:-target/release/wirebench}
PAIRS=${2:-3}
TB=tcpgro
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 2; }
command -v ethtool >/dev/null || { echo "ethtool missing: apt-get install ethtool" >&2; exit 2; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; "$WB" testbed down --name $TB >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$WB" testbed up router --name $TB --rate 1gbit --mtu 1500 >/dev/null
nss=$(ip netns | awk '{print $1}' | grep -- "-$TB-")
A=$(echo "$nss" | grep -- "-$TB-a\$")
"$WB" testbed exec --name $TB b -- iperf3 -s -p 5541 >/dev/null 2>&1 & pids+=($!)
"$WB" testbed exec --name $TB b -- "$WB" recv -q -p 5542 >/dev/null 2>&1 & pids+=($!)
sleep 1
backlog() { python3 -c "print(sum(int(l.split()[1],16) for l in open('/proc/net/softnet_stat')))"; }
adrops() { ip netns exec "$A" tc -s qdisc | awk '/dropped/ {gsub(/[(),]/,""); for (i=1;i<=NF;i++) if ($i=="dropped" && $(i+1)>s) s=$(i+1)} END {print s+0}'; }
run() {
  local tool=$1 b0 q0
  b0=$(backlog); q0=$(adrops)
  if [ "$tool" = iperf3 ]; then
    timeout 60 "$WB" testbed exec --name $TB a -- iperf3 -c b -p 5541 -P 60 -t 5 -J >/tmp/$TB-ip.json 2>/dev/null
  else
    timeout 60 "$WB" testbed exec --name $TB a -- "$WB" send -a b -p 5542 -4 -T tcp --max --flows 60 -c 8000 -t 5000 --json /tmp/$TB-wb.json >/dev/null 2>&1
  fi
  python3 "$(dirname "$0")/tcp_total.py" "$tool" "/tmp/$TB-$([ "$tool" = iperf3 ] && echo ip || echo wb).json"
  echo ", backlog drops $(( $(backlog) - b0 )), node a qdisc drops $(( $(adrops) - q0 ))"
}
for mode in built gro; do
  if [ $mode = gro ]; then
    for n in $nss; do for d in $(ip netns exec "$n" ls /sys/class/net | grep '^eth'); do ip netns exec "$n" ethtool -K "$d" gro on >/dev/null; done; done
  fi
  echo "== $mode (load $(cut -d' ' -f1 /proc/loadavg))"
  for _ in $(seq 1 "$PAIRS"); do run iperf3; run wirebench; done
done
rm -f /tmp/$TB-ip.json /tmp/$TB-wb.json
