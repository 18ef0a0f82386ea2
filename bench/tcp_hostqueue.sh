#!/usr/bin/env bash
# What should check K1's bed model at the sending host (issue #24)? On a
# bed like K1's (router preset, 1 Gbit/s, MTU 1500) runs PAIRS pairs of
# iperf3 -P FLOWS then wirebench --flows FLOWS (5 s each) for each host
# queue variant named in MODES, changed on the live bed at nodes a and b:
#   keep    as `testbed up $UP` built it (UP: more `testbed up` options,
#           e.g. UP="--queue 16MiB --offloads on")
#   pfifo   as `testbed up` builds it by default: tbf at the link rate whose one-frame
#           peak bucket cuts GSO skbs into frames at enqueue, and a pfifo
#           of 1000 packets (frames)
#   bfifo   the same tbf and a byte FIFO of BFIFO bytes (default 4 MiB)
#   nosplit tbf without the peak bucket and with a 128 KiB bucket, so GSO
#           skbs (up to 64 KiB) stay whole and the pfifo counts skbs, as
#           a TSO NIC's transmit queue does (a diagnostic only: tbf then
#           charges the wire's 24 B once per skb, not per frame); needs GSO=1
# and prints per run the throughput, the retransmits, the drops of node
# a's qdisc and of the router's, and the host's backlog drops.
# Needs root, iperf3 and ethtool. GSO=1, GRO=1, CHRT=N: see below.
# Usage: bash bench/tcp_hostqueue.sh [wirebench] [PAIRS=5] [MODES="pfifo"] [FLOWS=60]
set -euo pipefail
WB=${1:-target/release/wirebench}
PAIRS=${2:-5}
MODES=${3:-pfifo}
FLOWS=${4:-60}
BFIFO=${BFIFO:-4194304}
# GSO=1 switches GSO/TSO on at the hosts' veths (the bed's default, like
# `--offloads off`, has them off: TCP then builds one skb per segment).
# GRO=1 switches GRO on at every veth of the bed first (veth then queues
# in its own NAPI ring, not in the per-CPU backlog; tcp_backlog_gro.sh).
# CHRT=N runs both tools' clients and servers under SCHED_FIFO priority N,
# so that on a host busy with other work they run as on a quiet one.
RT=(); [ -n "${CHRT:-}" ] && RT=(chrt -f "$CHRT")
TB=tcphq$$
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 2; }
command -v ethtool >/dev/null || { echo "ethtool missing: apt-get install ethtool" >&2; exit 2; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; "$WB" testbed down --name $TB >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# shellcheck disable=SC2086 # UP is a list of options
"$WB" testbed up router --name $TB --rate 1gbit --mtu 1500 ${UP:-} >/dev/null
A=wb-$TB-a B=wb-$TB-b R=wb-$TB-r1
for n in $A $B $R; do ip netns list | grep -q "^$n\b" || { echo "namespace $n not found" >&2; exit 1; }; done
"$WB" testbed exec --name $TB b -- "${RT[@]}" iperf3 -s -p 5541 >/dev/null 2>&1 & pids+=($!)
"$WB" testbed exec --name $TB b -- "${RT[@]}" "$WB" recv -q -p 5542 >/dev/null 2>&1 & pids+=($!)
if [ "${GSO:-0}" = 1 ]; then
  for n in $A $B; do ip netns exec $n ethtool -K eth0 gso on tso on >/dev/null; done
fi
if [ "${GRO:-0}" = 1 ]; then
  for n in $A $B $R; do for d in $(ip netns exec $n ls /sys/class/net | grep '^eth'); do ip netns exec $n ethtool -K "$d" gro on >/dev/null; done; done
fi
sleep 1
backlog() { python3 -c "print(sum(int(l.split()[1],16) for l in open('/proc/net/softnet_stat')))"; }
# Drops of a namespace's root qdiscs (a root counts its children's drops).
drops() { ip netns exec "$1" tc -s qdisc | awk '/^qdisc/ {root=($0 ~ / root /)} root && /dropped/ {gsub(/[(),]/,""); for (i=1;i<=NF;i++) if ($i=="dropped") s+=$(i+1)} END {print s+0}'; }
setmode() {
  for n in $A $B; do
    case $1 in
      keep) ;;
      pfifo|bfifo)
        ip netns exec $n tc qdisc replace dev eth0 root handle 1: tbf rate 1gbit burst 46875 limit 1514000 overhead 24 mpu 84 peakrate 1tbit mtu 1514
        if [ "$1" = bfifo ]; then q="bfifo limit $BFIFO"; else q="pfifo limit 1000"; fi
        ip netns exec $n tc qdisc del dev eth0 parent 1:1 2>/dev/null || true
        ip netns exec $n tc qdisc add dev eth0 parent 1:1 handle 10: $q
        ;;
      nosplit)
        ip netns exec $n tc qdisc replace dev eth0 root handle 1: tbf rate 1gbit burst 131072 limit 1514000 overhead 24 mpu 84
        ip netns exec $n tc qdisc del dev eth0 parent 1:1 2>/dev/null || true
        ip netns exec $n tc qdisc add dev eth0 parent 1:1 handle 10: pfifo limit 1000
        ;;
      *) echo "unknown mode $1" >&2; exit 2 ;;
    esac
  done
}
run() {
  local tool=$1 b0 a0 r0
  b0=$(backlog); a0=$(drops $A); r0=$(drops $R)
  if [ "$tool" = iperf3 ]; then
    timeout 60 "$WB" testbed exec --name $TB a -- "${RT[@]}" iperf3 -c b -p 5541 -P "$FLOWS" -t 5 -J >/tmp/$TB-ip.json 2>/dev/null || echo -n "(iperf3 failed) "
  else
    timeout 60 "$WB" testbed exec --name $TB a -- "${RT[@]}" "$WB" send -a b -p 5542 -4 -T tcp --max --flows "$FLOWS" -c 8000 -t 5000 --json /tmp/$TB-wb.json >/dev/null 2>&1 || echo -n "(wirebench failed) "
  fi
  python3 "$(dirname "$0")/tcp_total.py" "$tool" "/tmp/$TB-$([ "$tool" = iperf3 ] && echo ip || echo wb).json"
  echo ", node a drops $(( $(drops $A) - a0 )), router drops $(( $(drops $R) - r0 )), backlog drops $(( $(backlog) - b0 )), load $(cut -d' ' -f1 /proc/loadavg)"
}
for mode in $MODES; do
  setmode "$mode"
  echo "== $mode (GSO=${GSO:-0} GRO=${GRO:-0}): $(ip netns exec $A tc qdisc show dev eth0 | tr '\n' ';')"
  for _ in $(seq 1 "$PAIRS"); do run iperf3; run wirebench; done
done
rm -f /tmp/$TB-ip.json /tmp/$TB-wb.json
