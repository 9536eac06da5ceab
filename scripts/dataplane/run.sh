#!/usr/bin/env bash
# The data plane's measurements (issue 15) in one session. Every figure is a
# ratio within one run (kelpie against raw TCP, against ps-lite, secured
# against plain, after against before), repeated; summary.go prints medians
# with the spread, and record.go gathers every raw file with the command,
# commit, machine and the README's tables into OUT/record.json (`make
# bench-dataplane` copies it to docs/bench/dataplane.json, what the README
# quotes). Take it in a quiet moment: check `uptime` first.
#
#   scripts/dataplane/run.sh [OUT]
#
# Environment:
#   KELPIE      the kelpie binary to measure (default: built from this tree)
#   REPEATS     runs of each measurement (3)
#   PSLITE_BIN  ps-lite's kvbench (default ~/.cache/kelpie-pslite/kvbench; built by
#               scripts/dataplane/pslite/build.sh, which fetches dmlc/ps-lite); skipped if absent
#   PSLITE_RUN  ps-lite's run script (default scripts/dataplane/pslite/run.sh)
#   BEFORE      space-separated kelpie binaries to compare end to end (e.g. a build of
#               52bb602, the gRPC-only data plane); empty: only this one
#   E2E         space-separated job specs for samples/s (default: examples/mnist-mlp.yaml
#               and scripts/dataplane/comm-mlp.yaml); E2E=none skips them
#   PARTS       which parts to run: any of bench unix pslite security e2e (all)
#   RECORD      also copy the record here (make bench-dataplane: docs/bench/dataplane.json)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/out/dataplane}
repeats=${REPEATS:-3}
parts=${PARTS:-bench unix pslite security e2e}
mkdir -p "$out"
if [ -z "${KELPIE:-}" ]; then
  KELPIE=$out/kelpie
  (cd "$root" && go build -o "$KELPIE" ./cmd/kelpie)
fi
pslite_bin=${PSLITE_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/kelpie-pslite/kvbench}
pslite_run=${PSLITE_RUN:-$here/pslite/run.sh}
want() { [[ " $parts " == *" $1 "* ]]; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >"$out/load.txt"

for ((i = 1; i <= repeats; i++)); do
  if want bench; then
    echo "== kelpie bench pushpull, tcp, run $i" >&2
    "$KELPIE" bench pushpull --json --transport tcp 2>"$out/bench-tcp-$i.log" >"$out/bench-tcp-$i.json"
  fi
  if want unix; then
    echo "== kelpie bench pushpull, unix, run $i" >&2
    "$KELPIE" bench pushpull --json --transport unix --configs 1x1 2>"$out/bench-unix-$i.log" >"$out/bench-unix-$i.json"
  fi
  if want pslite && [ -x "$pslite_bin" ]; then
    echo "== ps-lite kvbench, run $i" >&2
    # One retry: its processes rendezvous on a random port.
    timeout 300 bash "$pslite_run" 1 1 300 "$pslite_bin" >"$out/pslite-$i.txt" ||
      timeout 300 bash "$pslite_run" 1 1 300 "$pslite_bin" >"$out/pslite-$i.txt" || true
  fi
  if want pslite && [ -x "$(dirname "$pslite_bin")/kv_app_benchmark" ]; then
    echo "== ps-lite's own tests/test_kv_app_benchmark, run $i" >&2
    timeout 300 bash "$here/pslite/run-own.sh" "$(dirname "$pslite_bin")/kv_app_benchmark" >"$out/pslite-own-$i.txt" || true
  fi
  if want security; then
    echo "== security cost, run $i" >&2
    "$KELPIE" bench pushpull --json --configs 1x1 --sizes 64K,1M,4M --ops push,pull --inflight 1 --security-cost \
      2>"$out/security-auth-$i.log" >"$out/security-auth-$i.json"
    "$KELPIE" bench pushpull --json --configs 1x1 --sizes 64K,1M,4M --ops push,pull --inflight 1 --security-cost --encryption on \
      2>"$out/security-enc-$i.log" >"$out/security-enc-$i.json"
  fi
done

if want e2e && [ "${E2E:-}" != none ]; then
  specs=${E2E:-$root/examples/mnist-mlp.yaml $here/comm-mlp.yaml}
  bins="${BEFORE:-} $KELPIE"
  for ((i = 1; i <= repeats; i++)); do
    for spec in $specs; do
      for bin in $bins; do
        name=$(basename "$spec" .yaml)
        tag=$(basename "$bin")
        echo "== end to end: $name with $tag, run $i" >&2
        (cd "$root" && "$bin" run "$spec" --json --quiet 2>/dev/null) >"$out/e2e__${name}__${tag}__$i.json" || true
      done
    done
  done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
go run "$here/summary.go" "$out" | tee "$out/summary.txt"
# The README's data-plane tables of this session, then one record of it
# (command, commit, machine, load, those tables, every raw file): the
# README quotes the committed record's tables word for word.
go run "$here/summary.go" -markdown "$out" >"$out/readme-tables.md"
commit=$(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown)
go run "$here/record.go" "$out" "REPEATS=$repeats PARTS='$parts' scripts/dataplane/run.sh" "$commit" >"$out/record.json"
if [ -n "${RECORD:-}" ]; then
  cp "$out/record.json" "$RECORD"
  echo "record: $out/record.json, copied to $RECORD (commit it; paste its readme field into the README's Data plane section)" >&2
else
  echo "record: $out/record.json" >&2
fi
