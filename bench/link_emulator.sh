#!/usr/bin/env bash
# The test-bed's link backends (docs/testbed.md, "Link backends" and "How
# exact it is"): for each backend, frame size (70 B, the smallest frame
# wirebench sends: 24 B of probe header; and 1518 B) and link rate on a
# ladder, a UDP sender for 3 s on the `direct` preset (one link).
#
# Two kinds of columns, each rung measuring both:
# - end to end (`e2e_*`, through the hosts' stacks, as a study sees it):
#   the payload rate that arrives against the Ethernet model, its ratio,
#   and its verdict: `held` within 0.5 %, `sender-limited` when the
#   sender could not offer the link, `receiver-limited` when b's own
#   socket dropped what the link delivered (the loss split's
#   `receiver_host`).
# - the wire (`wire_ratio`, `idle`, `own_*`; emulator rows only, from the emulator's counters
#   file, read directly by this script while the sender runs): the
#   frames the wire delivered in a window inside the run (0.5 s from
#   either end of the span it delivered frames in) x their wire bytes
#   over the window, against the link rate (`wire_ratio`); the share of
#   the window the wire stood idle (`idle`: the input did not keep its
#   queue backlogged); and the emulator's own added-delay error per
#   frame in that window (`own_p50/p99`: send minus the model's due
#   time, from its histogram; an upper bucket edge, at most 1/8 above).
#   An emulator rung is judged by the wire: `held` when the wire ratio
#   is within 0.5 % with the wire idle under 0.5 % of the window,
#   `not-backlogged` when the input left it idle (the rung cannot be
#   judged; `no-window` when the frames did not flow for a second),
#   `not-held` otherwise. What b's socket then loses of what the wire
#   delivered (the loss split's `receiver_host`, of the datagrams sent)
#   is `rx_loss`, beside the verdict, not a stop. The `socket`
#   rows keep the end-to-end verdict (a's qdisc holds that sender to
#   about the link rate, so the wire is not always backlogged); their
#   wire columns are shown beside it.
# Then, for the emulator, 500 probes at a tenth of the link (at most
# 2 000/s) over the same link with a 10 ms delay: their one-way delay
# minus the model (serialisation + 10 ms) is the end-to-end added-delay
# error (`e2e_p50/p99`, hosts' stacks included), and the emulator's own
# error for the same probes is `probe_own_p50/p99`. Last, the emulator
# process's CPU time per Gbit/s the wire carried (tbf's work is kernel
# softirq time that no process owns: not attributed).
#
# Each emulator rung runs on two host paths (column `path`): `socket`,
# the hosts' UDP sockets at `--max`, as a study runs (a's own qdisc
# holds the sender back to about the link rate); and `xdp`, the AF_XDP
# sender (`send --xdp eth0`), which bypasses a's qdisc, paced at
# OVERFILL x the link's frame rate (default 1.25: at 1.05 the backlog
# grows too slowly at 10 Mbit/s to outlast the sender's stalls; `max` for
# `--max`), so the emulator's queue stays backlogged and the rung
# measures the wire. (At `--max` the sender offers 2-25 x the link and
# the flood of arrivals, whose kernel receive work shares the emulator's
# CPU, adds to its error: p99 150-200 us against 74-98 us at 1.05 x, 100
# Mbit/s of 1518 B.) tbf rows are socket-path only (AF_XDP would bypass the tbf
# itself). Sender and receiver run at SCHED_FIFO 50 (the AF_XDP sender
# at normal priority: it would hold a core), the emulator at 70
# (docs/testbed.md), the sampler of its counters at 60. The ladder stops
# for a frame size where a socket row could not be judged (sender- or
# receiver-limited); the xdp rows climb every rung (one the AF_XDP
# sender left idle, `not-backlogged`, says nothing of the next).
#
#   bench/link_emulator.sh [RATES...]   # default: 10mbit 50mbit 100mbit 200mbit 500mbit 1gbit
#   BACKENDS="emulator tbf" (default both); PATHS="socket xdp" (default
#   both; the emulator's); OVERFILL (above); TB=test-bed name (default
#   lkbench); SLACK=the emulator's slack (`testbed up --slack`; default
#   the test-bed's, 50us);
#   WIREBENCH=path to use a built binary. Needs root. Runs its own
#   test-bed and removes it on exit. Backends are forced: the emulator
#   with a 1 ns delay (it takes any link with an impairment up to
#   1 Gbit/s), tbf alone with offloads on (the emulator never takes a
#   link with offloads).
set -euo pipefail
rates=("$@"); [[ ${#rates[@]} -gt 0 ]] || rates=(10mbit 50mbit 100mbit 200mbit 500mbit 1gbit)
read -r -a backends <<<"${BACKENDS:-emulator tbf}"
read -r -a paths <<<"${PATHS:-socket xdp}"
tb=${TB:-lkbench}; port=15981; over=${OVERFILL:-1.25}
. "$(dirname "${BASH_SOURCE[0]}")/link_common.sh"
counters=/run/wirebench/$tb.link0.counters

up() { # backend rate delay
    local extra=()
    case $1 in
        emulator) extra=(--delay "$3" ${SLACK:+--slack "$SLACK"}) ;;
        tbf) extra=(--offloads on) ;;
    esac
    [[ -n "$recv_pid" ]] && kill "$recv_pid" 2>/dev/null || true
    "$wb" testbed up direct --name "$tb" --rate "$2" "${extra[@]}" >/dev/null
    "$wb" testbed exec --name "$tb" b -- chrt -f 50 "$wb" recv -p $port >/dev/null 2>&1 & recv_pid=$!
    sleep 1
}
cpu_ticks() { # total utime+stime of the emulator, 0 without one
    local pid; pid=$(ip netns pids "wb-$tb-_l0" 2>/dev/null | head -1)
    if [[ -n "$pid" ]]; then awk '{print $14 + $15}' "/proc/$pid/stat"; else echo 0; fi
}
send() { # out.json chrt-args args...
    local out=$1 prio=$2; shift 2
    rm -f "$out"
    # shellcheck disable=SC2086 # prio is a list of words or none
    timeout 60 "$wb" testbed exec --name "$tb" a -- $prio "$wb" send -a b -p $port -4 --json "$out" "$@" >/dev/null 2>&1
}
sample() { # out: starts the sampler (above the real-time hosts, it mostly
    # sleeps) and waits for its first snapshot
    rm -f "$1" "$1.ready"
    chrt -f 60 python3 "$dir/sampler.py" "$counters" "$1" & sampler=$!
    for _ in $(seq 100); do [[ -e "$1.ready" ]] && return; sleep 0.05; done
}

# The emulator's counters file, laid out as crates/testbed/src/emu_run.rs
# says (COUNTERS words per direction, then SEND_ERROR_BUCKETS per
# direction): snapshots with their CLOCK_MONOTONIC time every 50 ms, by a
# sampler started before the sender, until no frame came for 1 s after
# some did (the sender is done). The wire's window runs from 0.5 s after
# the first snapshot that saw frames delivered to 0.5 s before the last.
cat >"$dir/sampler.py" <<'PY'
import json, struct, sys, time
path, out = sys.argv[1:3]
def snap():
    t0 = time.monotonic()
    with open(path, "rb") as f:
        b = f.read(4096)
    t1 = time.monotonic()
    return {"t": (t0 + t1) / 2, "w": list(struct.unpack(f"={len(b) // 8}Q", b[: len(b) // 8 * 8]))}
snaps = [snap()]
open(out + ".ready", "w").close()
deadline, quiet = time.monotonic() + 30, None
while time.monotonic() < deadline:
    time.sleep(0.05)
    snaps.append(snap())
    moved = snaps[-1]["w"][0] - snaps[-2]["w"][0] >= 5
    if moved:
        quiet = snaps[-1]["t"]
    elif quiet is not None and snaps[-1]["t"] - quiet > 1.0:
        break
json.dump(snaps, open(out, "w"))
PY

uptime
printf '%-8s %-6s %-8s %-6s %-9s %-9s %-9s %-7s %-16s %-10s %-7s %-7s %-7s %-14s %-7s %-9s %-9s %-10s %-10s\n' \
    backend path rate frame model_Mb sender_Mb e2e_Mb e2e_rat e2e_verdict wire_ratio idle own_p50 own_p99 verdict rx_loss \
    e2e_p50us e2e_p99us probe_own50 probe_own99
for be in "${backends[@]}"; do
  for path in "${paths[@]}"; do
    [[ $be == tbf && $path == xdp ]] && continue
    for payload in 24 1472; do
        for r in "${rates[@]}"; do
            bps=$(python3 -c "
import re; m=re.fullmatch(r'([0-9.]+)(k|m|g)bit','$r'); print(int(float(m[1])*{'k':1e3,'m':1e6,'g':1e9}[m[2]]))")
            frame=$((payload + 28 + 14 + 4)); wire=$((payload + 28 + 14 + 24)); ((wire < 84)) && wire=84
            probe_pps=$(( bps / (wire * 8) / 10 )); ((probe_pps > 2000)) && probe_pps=2000
            via=(); prio="chrt -f 50"
            # The AF_XDP sender at --max would hold a core at real-time
            # priority; it overfills the link at normal priority.
            load=(--max)
            if [[ $path == xdp ]]; then
                via=(--xdp eth0); prio=""
                [[ $over != max ]] && load=(-C "$(python3 -c "print(int($bps / ($wire * 8) * $over))")")
            fi
            up "$be" "$r" 1ns
            rm -f "$dir/sat.json" "$dir/lat.json" "$dir/sat.wire" "$dir/lat.wire"
            sampler=""
            if [[ $be == emulator ]]; then
                sample "$dir/sat.wire"
            fi
            t0=$(cpu_ticks)
            send "$dir/sat.json" "$prio" "${via[@]}" "${load[@]}" -c "$payload" -t 3000 || true
            t1=$(cpu_ticks)
            [[ -n "$sampler" ]] && { wait "$sampler" || true; }
            if [[ $be == emulator ]]; then
                up "$be" "$r" 10ms
                sample "$dir/lat.wire"
                send "$dir/lat.json" "$prio" "${via[@]}" -C "$probe_pps" -c "$payload" -z 500 || true
                wait "$sampler" || true
            fi
            verdict=$(python3 - "$dir" "$bps" "$payload" "$wire" "$t0" "$t1" "$r" "$frame" "$be" "$path" <<'PY'
import json, math, os, sys
d, bps, payload, wire, t0, t1, rate, frame, be, path = sys.argv[1:]
bps, payload, wire = int(bps), int(payload), int(wire)
hz = os.sysconf("SC_CLK_TCK")
model = bps * payload / wire
COUNTERS, BUCKETS = 16, 240  # emu_run.rs: COUNTERS, SEND_ERROR_BUCKETS (a test checks)
def load(name):
    try:
        return json.load(open(os.path.join(d, name)))
    except Exception:
        return None
def word(s, k):  # direction a→b's counter k
    return s["w"][k] if k < len(s["w"]) else 0
def bucket_low(i):
    if i < 8:
        return i
    e, sub = i // 8 + 2, i % 8
    return (8 + sub) << (e - 3)
def quantile_us(x, y, q):  # the emulator's own error between snapshots x, y
    h = [word(y, 2 * COUNTERS + i) - word(x, 2 * COUNTERS + i) for i in range(BUCKETS)]
    n = sum(h)
    if n <= 0 or min(h) < 0:
        return "-"
    rank, seen = max(1, math.ceil(q * n - 1e-9)), 0
    for i, c in enumerate(h):
        seen += c
        if seen >= rank:
            return f"{bucket_low(i + 1) / 1e3:.1f}" if i + 1 < BUCKETS else "inf"
    return "-"

sat = load("sat.json")
try:
    f = sat["flows"][0]
    got = f["throughput_bps"]["payload"]
    offered = f["sent"]["packets"] * payload * 8 / f["sent"]["duration_s"]
    rx_lost = f["loss_split"]["receiver_host"] / max(f["sent"]["packets"], 1)
    send_path = json.dumps(sat["host"].get("send_path", "")).lower()
except Exception:
    got = offered = rx_lost = float("nan")
    send_path = ""
if path == "xdp" and "xdp" not in send_path:
    print(f"warning: the xdp row ran on another path: {send_path}", file=sys.stderr)
ratio = got / model
if abs(ratio - 1) <= 0.005:
    e2e = "held"
elif rx_lost > 0.005:
    e2e = "receiver-limited"
elif offered == offered and offered < model * 0.995:
    e2e = "sender-limited"
else:
    e2e = "not-held"

wire_ratio = idle = own50 = own99 = rx_loss = "-"
verdict = e2e
carried_bits = got / payload * wire * 8 * 3 if got == got else float("nan")
def window(snaps):  # (a, b): 0.5 s inside the span in which frames were delivered
    moved = [i for i in range(1, len(snaps)) if word(snaps[i], 1) > word(snaps[i - 1], 1)]
    if not moved:
        return None
    t_first, t_last = snaps[moved[0] - 1]["t"], snaps[moved[-1]]["t"]
    inside = [s for s in snaps if t_first + 0.5 <= s["t"] <= t_last - 0.5]
    return (inside[0], inside[-1]) if len(inside) >= 2 and inside[-1]["t"] - inside[0]["t"] >= 0.5 else None
w = load("sat.wire")
if be == "emulator":
    if path == "xdp":
        verdict = "no-window"
    win = window(w) if w else None
    if win:
        a, b = win
        span = b["t"] - a["t"]
        delivered = word(b, 1) - word(a, 1)
        wr = delivered * wire * 8 / span / bps
        idle_share = (word(b, 10) - word(a, 10)) / 1e9 / span
        wire_ratio, idle = f"{wr:.4f}", f"{idle_share:.4f}"
        own50, own99 = quantile_us(a, b, 0.5), quantile_us(a, b, 0.99)
        if path != "xdp":
            pass  # the socket row is judged end to end
        elif idle_share > 0.005:
            verdict = "not-backlogged"
        elif abs(wr - 1) <= 0.005:
            verdict = "held"
        else:
            verdict = "not-held"
        total = word(w[-1], 1) - word(w[0], 1)
        carried_bits = total * wire * 8
        if rx_lost == rx_lost:
            rx_loss = f"{rx_lost:.4f}"
cpu = (int(t1) - int(t0)) / hz
cpu_txt = f"{cpu / (carried_bits / 1e9):.2f}" if be == "emulator" and carried_bits > 0 else "-"
e50 = e99 = p50 = p99 = "-"
try:
    dl = load("lat.json")["flows"][0]["delay_s"]
    ser = wire * 8 / bps
    e50 = f"{(dl['p50'] - 0.010 - ser) * 1e6:.1f}"
    e99 = f"{(dl['p99'] - 0.010 - ser) * 1e6:.1f}"
except Exception:
    pass
lw = load("lat.wire")
if lw:
    p50, p99 = quantile_us(lw[0], lw[-1], 0.5), quantile_us(lw[0], lw[-1], 0.99)
print(f"{be:<8} {path:<6} {rate:<8} {frame:<6} {model/1e6:<9.3f} {offered/1e6:<9.1f} {got/1e6:<9.3f} {ratio:<7.4f} "
      f"{e2e:<16} {wire_ratio:<10} {idle:<7} {own50:<7} {own99:<7} {verdict:<14} {rx_loss:<7} "
      f"{e50:<9} {e99:<9} {p50:<10} {p99:<10} cpu_s/Gbit {cpu_txt}", file=sys.stderr)
print(verdict)
PY
)
            # Above a socket rung that could not be judged, nothing more
            # can be.
            [[ $path == socket ]] && case $verdict in sender-limited|receiver-limited) break ;; esac
        done
    done
  done
done
uptime
