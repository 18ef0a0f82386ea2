#!/usr/bin/env bash
# wirebench vs D-ITG vs iperf3 on loopback, one table of ratios.
# (Sessions of many flows: `--sections many` here, against D-ITG and
# iperf3 -P; bench/many_flows.py for wirebench's own pacing modes. Many bulk
# TCP flows on loopback and the 1 Gbit/s router test-bed: `--sections
# tcpmany`, which runs bench/tcp_many.py.)
#
#   bench/compare.sh [--quick] [--no-build] [compare.py options...]
#
# Builds the release `wirebench` binary (unless --no-build or WIREBENCH is
# set), checks that iperf3 and D-ITG are installed (scripts/setup installs
# them), then runs bench/compare.py. All traffic stays on 127.0.0.1.
# Receivers are started by compare.py in their own process groups; their
# pids are written to a pid file, and the EXIT trap below kills any that are
# still alive whatever way the run ends.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"

build=1
args=()
for a in "$@"; do
    case "$a" in
        --no-build) build=0 ;;
        -h|--help) exec python3 "$here/compare.py" --help ;;
        *) args+=("$a") ;;
    esac
done

missing=()
for t in python3 iperf3 ITGSend ITGRecv ITGDec; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if ((${#missing[@]})); then
    echo "compare.sh: missing ${missing[*]} (run scripts/setup to install iperf3 and d-itg)" >&2
    exit 2
fi

if [[ -z "${WIREBENCH:-}" ]]; then
    target="${CARGO_TARGET_DIR:-$root/target}"
    if ((build)); then
        echo "building wirebench (release)..." >&2
        (cd "$root" && cargo build --release -q -p wirebench && cargo build --release -q -p wirebench-engine --example xdp_path) >&2
    fi
    WIREBENCH="$target/release/wirebench"
fi

pidfile="$(mktemp /tmp/wirebench-bench-pids.XXXXXX)"
cleanup() {
    # Only the pids compare.py recorded: receivers this run started.
    while read -r pid; do
        [[ -n "$pid" ]] || continue
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    done <"$pidfile"
    rm -f "$pidfile"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wb=()
if [[ -x "$WIREBENCH" ]]; then
    wb=(--wirebench "$WIREBENCH")
else
    echo "compare.sh: no wirebench binary at $WIREBENCH; comparing the reference tools only" >&2
fi

python3 "$here/compare.py" --pidfile "$pidfile" "${wb[@]}" "${args[@]}"
