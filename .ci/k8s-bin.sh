#!/usr/bin/env bash
# Builds the Kubernetes control plane used by kelpie's Kubernetes tests from the Go module proxy
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok, kwokctl) into a cache
# directory outside the repository, skipping every binary that is already there.
# Usage: .ci/k8s-bin.sh [DIR]   (default: ${XDG_CACHE_HOME:-$HOME/.cache}/kelpie/k8s-v$K8S_VERSION)
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
STAGING_VERSION=${STAGING_VERSION:-0.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.8}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
DIR=${1:-${KELPIE_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/kelpie/k8s-v$K8S_VERSION}}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
WORK="$DIR/.build"
GO=${GO:-go}
export GOFLAGS=-buildvcs=false

have() { [ -x "$DIR/$1" ]; }

log() { printf 'k8s-bin: %s\n' "$*" >&2; }

if ! have kube-apiserver || ! have kube-controller-manager || ! have kube-scheduler || ! have kubectl; then
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl v$K8S_VERSION into $DIR (several minutes from a cold cache)"
  m="$WORK/kubernetes"
  mkdir -p "$m"
  cd "$m"
  "$GO" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  modfile=$("$GO" env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod
  {
    echo "module kelpie.local/k8sbin"
    echo
    echo "go $(sed -n 's/^go //p' "$modfile" | head -1)"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v'"$STAGING_VERSION"'#p' "$modfile"
    echo ")"
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

// Package k8sbin pins the Kubernetes commands kelpie's tests run.
package k8sbin

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  "$GO" mod tidy -e >/dev/null 2>"$m/tidy.log" || { cat "$m/tidy.log" >&2; exit 1; }
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    have "$c" && continue
    log "go build $c"
    "$GO" build -tags tools -trimpath -ldflags "$ld" -o "$DIR/$c.tmp" "k8s.io/kubernetes/cmd/$c"
    mv "$DIR/$c.tmp" "$DIR/$c"
  done
fi

if ! have etcd; then
  log "building etcd v$ETCD_VERSION"
  m="$WORK/etcd"
  mkdir -p "$m"
  cd "$m"
  printf 'module kelpie.local/etcdbin\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" > go.mod
  printf '//go:build tools\n\n// Package etcdbin pins etcd.\npackage etcdbin\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  "$GO" mod tidy -e >/dev/null 2>"$m/tidy.log" || { cat "$m/tidy.log" >&2; exit 1; }
  "$GO" build -trimpath -ldflags "-s -w" -o "$DIR/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$DIR/etcd.tmp" "$DIR/etcd"
fi

for c in kwok kwokctl; do
  have "$c" && continue
  log "building $c v$KWOK_VERSION"
  GOBIN="$DIR/.gobin" "$GO" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/$c@v$KWOK_VERSION"
  mv "$DIR/.gobin/$c" "$DIR/$c"
done

# kwok's stage configurations (Pods go Running, nodes Ready) ship in its module.
if [ ! -d "$DIR/kwok-stages" ]; then
  kdir=$("$GO" mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  mkdir -p "$DIR/kwok-stages.tmp"
  cp -r "$kdir/kustomize/stage/." "$DIR/kwok-stages.tmp/"
  chmod -R u+w "$DIR/kwok-stages.tmp"
  mv "$DIR/kwok-stages.tmp" "$DIR/kwok-stages"
fi

rm -rf "$DIR/.gobin"
echo "$DIR"
