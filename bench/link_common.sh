# Sourced (never run) by the link benches that build their own test-bed
# `$tb`: finds or builds the binary (`$wb`), makes a scratch directory
# (`$dir`) and removes the receiver (`$recv_pid`), the test-bed and the
# directory on exit, error and Ctrl-C.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wb="${WIREBENCH:-${CARGO_TARGET_DIR:-$root/target}/release/wirebench}"
[[ -x "$wb" ]] || (cd "$root" && cargo build --release -q -p wirebench)
dir="$(mktemp -d "/tmp/wirebench-$tb.XXXXXX")"
recv_pid=""
cleanup() {
    [[ -n "$recv_pid" ]] && kill "$recv_pid" 2>/dev/null || true
    "$wb" testbed down --name "$tb" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM
