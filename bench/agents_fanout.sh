#!/usr/bin/env bash
# Fan-out of agents: a campaign over N nodes (default 32: one sender, one
# receiver, the rest observed routers), every node a local agent, one run
# of one packet. Prints the wall time from `wirebench run` to the stored run,
# which is dominated by starting N agents, their hellos and metadata (all
# in parallel) and the per-run CPU/counter samples of every node.
#
#   bench/agents_fanout.sh [N]        # WIREBENCH=path to use a built binary
set -euo pipefail
n="${1:-32}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wb="${WIREBENCH:-${CARGO_TARGET_DIR:-$root/target}/release/wirebench}"
[[ -x "$wb" ]] || (cd "$root" && cargo build --release -q -p wirebench)
dir="$(mktemp -d /tmp/wirebench-fanout.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
f="$dir/fanout.toml"
{
    printf 'name = "fanout"\npackets = 1\nlinger_s = 0.1\n[hosts]\n'
    printf '[[hosts.node]]\nname = "snd"\nlocal = true\nrole = "sender"\n'
    printf '[[hosts.node]]\nname = "rcv"\nlocal = true\nrole = "receiver"\nipv4 = "127.0.0.1"\n'
    for i in $(seq 3 "$n"); do
        printf '[[hosts.node]]\nname = "r%d"\nlocal = true\nrole = "router"\n' "$i"
    done
    printf '[matrix]\nip = [4]\npayload = [100]\npps = [100]\n'
} >"$f"
t0=$(date +%s.%N)
"$wb" run "$f" --db "$dir/f.db" -q >/dev/null
t1=$(date +%s.%N)
python3 - "$dir/f.db" "$t0" "$t1" "$n" <<'PY'
import json, sqlite3, sys
db, t0, t1, n = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
row = sqlite3.connect(db).execute("select status, counters from runs").fetchone()
nodes = len(json.loads(row[1])["metadata"])
print(f"{n} nodes: run {row[0]}, metadata of {nodes} nodes stored, {t1 - t0:.2f} s wall from start to finish")
PY
