#!/usr/bin/env bash
# Builds mgmtctl, the lab and upstream's controllers into bin/, one line per
# step. The Go toolchain's own output (module downloads, compiler messages)
# is kept in a log and shown only when a step fails: the first screen of a
# cold `make demo` should be the project's, not `go: downloading` by the
# hundred.
#
#   hack/build.sh demo   what `make demo` runs: mgmtctl, the lab with its
#                        k3s and kubectl, upstream's cluster-api-operator
#                        and cert-manager at the pinned chart's version
#   hack/build.sh [all]  that, and what only the tests run: Helm's CLI,
#                        clusterctl and the older cert-manager the lab's
#                        chart repository serves (make build; the lab's
#                        tests run it through lab/labtest)
#
# go build rebuilds only what changed, and an up-to-date binary is not even
# relinked: a second run takes seconds. A lock on bin/ lets the lab's test
# binaries (go test runs packages side by side) and make build run it at
# once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
set_=${1:-all}
case "$set_" in
  demo | all) ;;
  *) echo "usage: hack/build.sh [demo|all]" >&2; exit 2 ;;
esac
bin="$root/bin"
mkdir -p "$bin"
exec 9>"$bin/.build.lock"
flock 9
# The first build's time, per set, measured on 2 cores with empty
# Go caches and the modules fetched (docs/testing.md).
declare -A first_time=([demo]="about 6 minutes" [all]="about 6 minutes for the demo's part and a few more for the tests'")
declare -A runs=([demo]="the demo runs" [all]="the demo and the tests run")
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# quiet DIR CMD...: runs CMD in DIR with its output in the log; on failure
# prints the log and stops.
quiet() {
  local dir=$1
  shift
  if ! (cd "$dir" && "$@") >"$log" 2>&1; then
    cat "$log" >&2
    echo "build: failed in ${dir#"$root"/}: $*" >&2
    exit 1
  fi
}

# in_turn "WHAT|FUNCTION"...: runs each FUNCTION in turn, saying what it
# builds before and how long it took after. In turn, not at once: the
# modules share most of their dependencies (client-go, apimachinery at one
# version for the tool and the lab), which a build run beside another
# compiles a second time instead of finding it in the cache: built side by
# side, a first demo build took 763 s against 642 s in turn (2 cores).
in_turn() {
  local j t0
  for j in "$@"; do
    echo "building ${j%%|*}"
    t0=$SECONDS
    "${j#*|}"
    [ $((SECONDS - t0)) -lt 5 ] || echo "  ($((SECONDS - t0)) s)"
  done
}

# The four modules: the tool's, the lab's, lab/upstream (upstream's
# operator and clusterctl, whose dependency set is not the lab's) and
# lab/certmanager (upstream's cert-manager commands). With
# GOPROXY=off a download succeeds only from the module cache, so the line
# below shows only when something is missing.
modules=("$root" "$root/lab" "$root/lab/upstream" "$root/lab/certmanager")
cached=yes
for m in "${modules[@]}"; do
  (cd "$m" && GOPROXY=off GOFLAGS=-mod=mod "$GO" mod download) >/dev/null 2>&1 || cached=no
done
if [ "$cached" = no ]; then
  echo "fetching the Go modules mgmtctl and the lab build from (first run only, about a minute)"
  for m in "${modules[@]}"; do quiet "$m" "$GO" mod download; done
fi

# Versions are go.mod's: the operator, clusterctl, cert-manager and Helm are
# stamped with the module versions they are built from, as upstream's
# release builds are.
operator=$(cd "$root/lab/upstream" && "$GO" list -m -f '{{.Version}}' sigs.k8s.io/cluster-api-operator)
clusterctl=$(cd "$root/lab/upstream" && "$GO" list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
certmanager=$(cd "$root/lab/certmanager" && "$GO" list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
helm=$(cd "$root/lab" && "$GO" list -m -f '{{.Version}}' helm.sh/helm/v3)
# The lab's and upstream's binaries are linked without a symbol table and
# DWARF, as Kubernetes' and Helm's release builds are (-s -w in
# Kubernetes' hack/lib/golang.sh unless DBG=1, in Helm's Makefile's
# LDFLAGS): a 240 MB k3s links in 5 s instead of 10, and a panic's trace
# still names every function.
# mgmtctl keeps its own.
strip="-s -w"
kube="$strip -X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"

# certmanager VERSION: cert-manager at VERSION, go.mod's or an older one
# through its own modfile (lab/certmanager/<v>.mod). One binary per
# version, named per component by links (the kubelet runs
# bin/cert-manager-<component>-<version>).
build_certmanager() {
  local v=$1 modfile=()
  [ "$v" = "$certmanager" ] || modfile=("-modfile=$v.mod")
  quiet "$root/lab/certmanager" "$GO" build "${modfile[@]}" -ldflags "$strip -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v" \
    -o "$bin/cert-manager-$v" .
  for c in controller webhook cainjector startupapicheck; do
    ln -sfn "cert-manager-$v" "$bin/cert-manager-$c-$v"
  done
}

build_mgmtctl() { quiet "$root" "$GO" build -o "$bin/mgmtctl" ./cmd/mgmtctl; }
build_lab() {
  quiet "$root/lab" "$GO" build -ldflags "$strip" -o "$bin/labsim" ./cmd/labsim
  quiet "$root/lab" "$GO" build -ldflags "$kube" -o "$bin/k3s" ./cmd/k3s
  quiet "$root/lab" "$GO" build -ldflags "$kube" -o "$bin/kubectl" ./cmd/kubectl
}
build_operator() {
  quiet "$root/lab/upstream" "$GO" build -ldflags "$strip -X sigs.k8s.io/cluster-api-operator/version.gitVersion=$operator" \
    -o "$bin/cluster-api-operator-$operator" sigs.k8s.io/cluster-api-operator/cmd
}
build_certmanager_pinned() { build_certmanager "$certmanager"; }
build_helm() { quiet "$root/lab" "$GO" build -ldflags "$strip -X helm.sh/helm/v3/internal/version.version=$helm" -o "$bin/helm" helm.sh/helm/v3/cmd/helm; }
build_clusterctl() {
  quiet "$root/lab/upstream" "$GO" build -ldflags "$strip -X sigs.k8s.io/cluster-api/version.gitVersion=$clusterctl" \
    -o "$bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
}
older=$(cd "$root/lab/certmanager" && ls v*.mod 2>/dev/null | sed 's/\.mod$//' | tr '\n' ' ')
build_certmanager_older() { for v in $older; do build_certmanager "$v"; done; }

# What the demo runs, then what only the tests run.
wanted=(mgmtctl labsim k3s kubectl "cluster-api-operator-$operator" "cert-manager-$certmanager")
[ "$set_" = demo ] || wanted+=(helm clusterctl $(for v in $older; do echo "cert-manager-$v"; done))
missing=no
for b in "${wanted[@]}"; do [ -e "$bin/$b" ] || missing=yes; done
if [ "$missing" = yes ]; then
  echo "building from source what ${runs[$set_]}: the first time on a machine ${first_time[$set_]} on 2 cores, seconds later on"
else
  echo "bringing bin/ up to date (go build rebuilds only what changed)"
fi
jobs=("mgmtctl|build_mgmtctl" "the lab's Kubernetes (labsim, k3s with its kube-apiserver, kubectl)|build_lab"
  "upstream's cluster-api-operator $operator|build_operator"
  "upstream's cert-manager $certmanager (controller, webhook, cainjector, startupapicheck in one binary)|build_certmanager_pinned")
[ "$set_" = demo ] || jobs+=("Helm's CLI $helm, for the tests|build_helm" "upstream's clusterctl $clusterctl, for the tests|build_clusterctl"
  "cert-manager ${older% }, for the tests|build_certmanager_older")
in_turn "${jobs[@]}"
