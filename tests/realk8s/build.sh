#!/usr/bin/env bash
# Build the real control-plane binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
# etcd, kwok) from their published Go modules with `go build`, through throw-away wrapper modules
# generated here at build time. Nothing of theirs is vendored or committed; no release binary is
# downloaded. Output is cached by version outside the work tree; a second run takes seconds.
#
#   tests/realk8s/build.sh            # builds (or reuses) and prints the binary folder last
#   REALK8S_CACHE=/somewhere tests/realk8s/build.sh
#
# Versions are pinned here and only here (tests/realk8s/binaries.py reads this folder layout).
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${REALK8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-capacity/realk8s}
OUT="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"
BINS="kube-apiserver kube-controller-manager kube-scheduler etcd kwok"

t0=$(date +%s)
step() { # step NAME START
  echo "realk8s build: $1 took $(( $(date +%s) - $2 )) s" >&2
}

complete() {
  for b in $BINS; do [ -x "$OUT/$b" ] || return 1; done
  [ -s "$OUT/kwok-stages.yaml" ] && [ -s "$OUT/VERSIONS" ]
}

# kwok's Logs and ClusterLogs CRDs (the cluster serves them, so pod logs reach kwok's kubelet
# API), read from kwok's module at build time, never committed. A cache built before they were
# copied gets them here (seconds: the module is in the module cache or the proxy).
kwok_crds() { # kwok_crds DEST
  local dir
  dir=$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$1/kwok-crds"
  for k in logs clusterlogs; do
    cp "$dir/kustomize/crd/bases/kwok.x-k8s.io_$k.yaml" "$1/kwok-crds/"
  done
}

mkdir -p "$CACHE"
if complete && [ ! -s "$OUT/kwok-crds/kwok.x-k8s.io_clusterlogs.yaml" ]; then
  kwok_crds "$OUT.crds" && mv "$OUT.crds/kwok-crds" "$OUT/" && rmdir "$OUT.crds"
fi
if complete; then
  ln -sfn "$OUT" "$CACHE/current"
  step "cache hit ($OUT)" "$t0"
  echo "$OUT"
  exit 0
fi

# One build at a time per cache folder (a concurrent caller waits, then reuses the result).
exec 9>"$CACHE/.lock"
flock 9
if complete; then
  ln -sfn "$OUT" "$CACHE/current"; step "cache hit after wait" "$t0"; echo "$OUT"; exit 0
fi

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOPATH="${GOPATH:-$(go env GOPATH)}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"            # v1.37.2 -> v0.37.2
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
echo "realk8s build: go $(go env GOVERSION), k8s $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION" >&2

# --- 1. kube-apiserver, kube-controller-manager, kube-scheduler -----------------------------------
s=$(date +%s)
KMOD=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
       | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
mkdir "$WORK/k8s"; cd "$WORK/k8s"
go mod init example.invalid/realk8s-bins >/dev/null 2>&1
# Every staging module k/k requires at v0.0.0 is routed to its published v0.<minor>.<patch>.
go mod edit -json "$KMOD" | python3 -c '
import json, sys
m = json.load(sys.stdin); v = sys.argv[1]
print("realk8s build: k8s.io/kubernetes go line:", m.get("Go"), file=sys.stderr)
for r in m.get("Replace") or []:
    if not r["New"]["Path"].startswith("./staging/"):
        sys.exit("non-staging replace in k8s.io/kubernetes go.mod, not carried over: %r" % (r,))
for r in m["Require"]:
    if r["Version"] == "v0.0.0":
        print("-replace=%s=%s@%s" % (r["Path"], r["Path"], v))
' "$STAGING_VERSION" > replaces.txt
xargs go mod edit < replaces.txt
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
             "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
             "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" >&2
step "k8s modules" "$s"
s=$(date +%s)
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR"
  LD="$LD -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
go build -trimpath -pgo=off -tags=selinux,notest -ldflags="$LD" -o "$OUT.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler
step "k8s build" "$s"

# --- 2. etcd (its own module: k8s's graph must not bump etcd's dependencies) ----------------------
s=$(date +%s)
mkdir "$WORK/etcd"; cd "$WORK/etcd"
go mod init example.invalid/realk8s-etcd >/dev/null 2>&1
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
go build -trimpath -ldflags="-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3
step "etcd" "$s"

# --- 3. kwok (no replace directives upstream, still built through a wrapper for the same flags) ---
s=$(date +%s)
mkdir "$WORK/kwok"; cd "$WORK/kwok"
go mod init example.invalid/realk8s-kwok >/dev/null 2>&1
go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
go build -trimpath -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  -o "$OUT.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
# kwok's own default stages, read from the module cache at build time (never committed).
S="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
first=1
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  [ $first = 1 ] || echo '---'; first=0; cat "$S/$f"
done > "$OUT.tmp/kwok-stages.yaml"
kwok_crds "$OUT.tmp"
step "kwok" "$s"

"$OUT.tmp/kube-apiserver" --version >&2
"$OUT.tmp/etcd" --version >&2
printf 'k8s=%s\netcd=%s\nkwok=%s\ngo=%s\n' "$K8S_VERSION" "$ETCD_VERSION" "$KWOK_VERSION" \
  "$(go env GOVERSION)" > "$OUT.tmp/VERSIONS"
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"; ln -sfn "$OUT" "$CACHE/current"
step "total" "$t0"
echo "$OUT"
