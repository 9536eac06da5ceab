#!/usr/bin/env bash
# Builds ps-lite and its push/pull benchmark (kvbench.cc) for a side-by-side run with
# `kelpie bench pushpull`.
#   build.sh [SRC] [OUT]
# SRC: a ps-lite checkout, or a git directory of dmlc/ps-lite with no work tree (it is checked
#      out into OUT/src); empty or "-": cloned from $PSLITE_REPO (https://github.com/dmlc/ps-lite)
#      into OUT/src.
# OUT: where to build (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kelpie-pslite).
# Prints the path of the built kvbench; ps-lite's own kv_app_benchmark is built beside it.
set -euo pipefail
src=${1:--}
out=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/kelpie-pslite}
repo=${PSLITE_REPO:-https://github.com/dmlc/ps-lite}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if [ "$src" = - ]; then
  tree=$out/src
  [ -f "$tree/CMakeLists.txt" ] || git clone --depth 1 "$repo" "$tree" >&2
elif [ -f "$src/CMakeLists.txt" ]; then
  tree=$src
else
  tree=$out/src
  mkdir -p "$tree"
  git --git-dir="$src" --work-tree="$tree" checkout -f HEAD -- .
fi
need=()
for p in libzmq3-dev libprotobuf-dev protobuf-compiler cmake g++; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
mkdir -p "$out/build"
(cd "$out/build" && cmake "$tree" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-O3 -march=native" >/dev/null && make -j"$(nproc)" pslite >/dev/null)
g++ -O3 -march=native -std=c++14 -I"$tree/include" -I"$out/build" "$here/kvbench.cc" "$out/build/libpslite.a" \
  -lzmq -lprotobuf -lpthread -o "$out/kvbench"
# ps-lite's own benchmark (tests/test_kv_app_benchmark.cc: one push and one
# pull of 10M keys, an empty handler), built from its source unchanged.
g++ -O3 -march=native -std=c++14 -I"$tree/include" -I"$out/build" "$tree/tests/test_kv_app_benchmark.cc" "$out/build/libpslite.a" \
  -lzmq -lprotobuf -lpthread -o "$out/kv_app_benchmark"
echo "$out/kvbench"
