#!/usr/bin/env bash
# Runs ps-lite's own benchmark (tests/test_kv_app_benchmark.cc, built by build.sh as
# kv_app_benchmark) pinned like run.sh: scheduler and server on cpu 1, the worker on cpu 0.
# One push and one pull of 10M keys with an empty server handler; prints ps-lite's lines
# "num = 10000000, Push average time cost: … ms" and the same for Pull.
#   run-own.sh [BIN]
set -u
bin=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/kelpie-pslite/kv_app_benchmark}
[ -x "$bin" ] || { echo "no $bin: run build.sh first" >&2; exit 2; }
export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 DMLC_INTERFACE=lo
export DMLC_PS_ROOT_PORT=$((20000 + RANDOM % 20000))
pids=()
DMLC_ROLE=scheduler taskset -c 1 "$bin" >/dev/null 2>&1 & pids+=($!)
DMLC_ROLE=server taskset -c 1 "$bin" >/dev/null 2>&1 & pids+=($!)
DMLC_ROLE=worker taskset -c 0 "$bin" 2>&1 | grep 'average time cost' & pids+=($!)
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
wait
