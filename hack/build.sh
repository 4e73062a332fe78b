#!/usr/bin/env bash
# Builds mgmtctl, the lab and upstream's controllers into bin/, one line per
# step. The Go toolchain's own output (module downloads, compiler messages)
# is kept in a log and shown only when a step fails: the first screen of a
# cold `make demo` should be the project's, not `go: downloading` by the
# hundred.
#
#   hack/build.sh lab       mgmtctl and the lab with its k3s and kubectl:
#                           what `make demo` needs before the lab starts
#   hack/build.sh upstream  upstream's cluster-api-operator and cert-manager
#                           at the pinned chart's version: what the demo's
#                           kubelet runs, built while the lab starts
#                           (hack/demo.sh)
#   hack/build.sh demo      both: everything `make demo` runs
#   hack/build.sh [all]     that, and what only the tests run: Helm's CLI,
#                           clusterctl, the older cert-manager the lab's
#                           chart repository serves and versitygw, the
#                           lab's S3 (make build; the lab's tests run it
#                           through lab/labtest)
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
  lab | upstream | demo | all | race) ;;
  *) echo "usage: hack/build.sh [lab|upstream|demo|all|race]" >&2; exit 2 ;;
esac
bin="$root/bin"
mkdir -p "$bin"
exec 9>"$bin/.build.lock"
flock 9
# The first build's time, per set, measured on 2 cores with empty
# Go caches (docs/testing.md).
declare -A first_time=([lab]="about 4 minutes" [upstream]="about 2 minutes" [demo]="about 6 minutes"
  [all]="about 6 minutes for the demo's part and a few more for the tests'" [race]="a few minutes")
declare -A runs=([lab]="mgmtctl and the lab run" [upstream]="the lab's kubelet runs"
  [demo]="the demo runs" [all]="the demo and the tests run" [race]="make test-race-e2e runs")
log=$(mktemp)
fetchlog=$(mktemp)
trap 'rm -f "$log" "$fetchlog"' EXIT

# The compiler's garbage collector runs less often: measured on 2 cores,
# a cold build of kubectl took 64 s with GOGC=400 against 75 s at the
# default 100. GOMEMLIMIT keeps a compile's heap bounded all the same (two
# compiles at once on 2 cores). A user's own setting wins.
export GOGC=${GOGC:-400} GOMEMLIMIT=${GOMEMLIMIT:-3GiB}

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

# install_bin NAME DIR GOBUILDARGS...: builds bin/NAME. A first build goes
# through a temporary file renamed into place, so bin/NAME never appears
# half written: the demo's kubelet starts it the moment it is there
# (hack/demo.sh builds upstream's binaries while the lab runs). Later
# builds go straight to bin/NAME, which go build leaves alone when it is
# up to date.
install_bin() {
  local name=$1 dir=$2
  shift 2
  if [ -e "$bin/$name" ]; then
    quiet "$dir" "$GO" build -o "$bin/$name" "$@"
    return
  fi
  quiet "$dir" "$GO" build -o "$bin/.$name.part" "$@"
  mv -f "$bin/.$name.part" "$bin/$name"
}

# The five modules: the tool's, the lab's, lab/upstream (upstream's
# operator and clusterctl, whose dependency set is not the lab's),
# lab/certmanager (upstream's cert-manager commands) and lab/s3gw
# (versitygw, the lab's S3); each set needs some.
# With GOPROXY=off a download succeeds only from the module cache, so the
# fetch below happens only when something is missing. The first module is
# fetched before its build; the others in the background while it builds
# (a build fetches what it needs itself, and the module cache takes
# concurrent downloads), so the network and the compiler work at once.
case "$set_" in
  lab) modules=("$root" "$root/lab") ;;
  race) modules=("$root") ;;
  upstream) modules=("$root/lab/certmanager" "$root/lab/upstream") ;;
  *) modules=("$root" "$root/lab" "$root/lab/upstream" "$root/lab/certmanager" "$root/lab/s3gw") ;;
esac
cached=yes
for m in "${modules[@]}"; do
  (cd "$m" && GOPROXY=off GOFLAGS=-mod=mod "$GO" mod download) >/dev/null 2>&1 || cached=no
done
fetching=
if [ "$cached" = no ]; then
  echo "fetching the Go modules mgmtctl and the lab build from (first run only; most of it while the first build runs)"
  quiet "${modules[0]}" "$GO" mod download
  (for m in "${modules[@]:1}"; do (cd "$m" && "$GO" mod download) || exit 1; done) >"$fetchlog" 2>&1 &
  fetching=$!
fi

# Versions are go.mod's: the operator, clusterctl, cert-manager and Helm are
# stamped with the module versions they are built from, as upstream's
# release builds are.
version() { (cd "$root/$1" && "$GO" list -m -f '{{.Version}}' "$2"); }
operator= clusterctl= certmanager= helm= older= versitygw=
case "$set_" in
  upstream | demo | all)
    operator=$(version lab/upstream sigs.k8s.io/cluster-api-operator)
    certmanager=$(version lab/certmanager github.com/cert-manager/cert-manager)
    ;;
esac
if [ "$set_" = all ]; then
  clusterctl=$(version lab/upstream sigs.k8s.io/cluster-api)
  helm=$(version lab helm.sh/helm/v3)
  older=$(cd "$root/lab/certmanager" && ls v*.mod 2>/dev/null | sed 's/\.mod$//' | tr '\n' ' ')
  versitygw=$(version lab/s3gw github.com/versity/versitygw)
fi
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
# bin/cert-manager-<component>-<version>), which point at nothing until
# the binary is in place.
build_certmanager() {
  local v=$1 modfile=()
  [ "$v" = "$certmanager" ] || modfile=("-modfile=$v.mod")
  for c in controller webhook cainjector startupapicheck; do
    ln -sfn "cert-manager-$v" "$bin/cert-manager-$c-$v"
  done
  install_bin "cert-manager-$v" "$root/lab/certmanager" "${modfile[@]}" -ldflags "$strip -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v" .
}

build_mgmtctl() { quiet "$root" "$GO" build -o "$bin/mgmtctl" ./cmd/mgmtctl; }
# The lab's three commands in one go build: one build graph, so one
# command's link runs beside another's compiles. labsim has no
# k8s.io/component-base/version to stamp; the linker skips what it lacks.
build_lab() {
  quiet "$root/lab" "$GO" build -ldflags "$kube" -o "$bin/" ./cmd/labsim ./cmd/k3s ./cmd/kubectl
}
build_operator() {
  install_bin "cluster-api-operator-$operator" "$root/lab/upstream" \
    -ldflags "$strip -X sigs.k8s.io/cluster-api-operator/version.gitVersion=$operator" sigs.k8s.io/cluster-api-operator/cmd
}
build_certmanager_pinned() { build_certmanager "$certmanager"; }
build_helm() { quiet "$root/lab" "$GO" build -ldflags "$strip -X helm.sh/helm/v3/internal/version.version=$helm" -o "$bin/helm" helm.sh/helm/v3/cmd/helm; }
build_clusterctl() {
  quiet "$root/lab/upstream" "$GO" build -ldflags "$strip -X sigs.k8s.io/cluster-api/version.gitVersion=$clusterctl" \
    -o "$bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
}
build_certmanager_older() { for v in $older; do build_certmanager "$v"; done; }
# mgmtctl with Go's race detector, for make test-race-e2e: TestHA and
# TestHARestore run it (MGMTCTL_E2E_RACE=1), where its Checks, dials and
# waits run side by side; a data race there fails the test that met it
# (GORACE's report files). Not in all: make test runs the unit tests with
# -race, and the instrumented tool, several times slower, only added to a
# suite that was already CPU-bound (docs/testing.md).
build_mgmtctl_race() { quiet "$root" "$GO" build -race -o "$bin/mgmtctl-race" ./cmd/mgmtctl; }
build_versitygw() { install_bin versitygw "$root/lab/s3gw" -ldflags "$strip" github.com/versity/versitygw/cmd/versitygw; }

# What the demo runs, in the order it needs it (cert-manager's chart
# installs before the operator's), then what only the tests run.
wanted=() jobs=()
case "$set_" in
  lab | demo | all)
    wanted+=(mgmtctl labsim k3s kubectl)
    jobs+=("mgmtctl|build_mgmtctl" "the lab's Kubernetes (labsim, k3s with its kube-apiserver, kubectl)|build_lab")
    ;;
esac
case "$set_" in
  upstream | demo | all)
    wanted+=("cert-manager-$certmanager" "cluster-api-operator-$operator")
    jobs+=("upstream's cert-manager $certmanager (controller, webhook, cainjector, startupapicheck in one binary)|build_certmanager_pinned"
      "upstream's cluster-api-operator $operator|build_operator")
    ;;
esac
if [ "$set_" = all ]; then
  wanted+=(helm clusterctl $(for v in $older; do echo "cert-manager-$v"; done) versitygw)
  jobs+=("Helm's CLI $helm, for the tests|build_helm" "upstream's clusterctl $clusterctl, for the tests|build_clusterctl"
    "cert-manager ${older% }, for the tests|build_certmanager_older" "versitygw $versitygw, the lab's S3, for the tests|build_versitygw")
fi
if [ "$set_" = race ]; then
  wanted+=(mgmtctl-race)
  jobs+=("mgmtctl with the race detector, for make test-race-e2e|build_mgmtctl_race")
fi
missing=no
for b in "${wanted[@]}"; do [ -e "$bin/$b" ] || missing=yes; done
if [ "$missing" = yes ]; then
  echo "building from source what ${runs[$set_]}: the first time on a machine ${first_time[$set_]} on 2 cores, seconds later on"
else
  echo "bringing bin/ up to date (go build rebuilds only what changed)"
fi
in_turn "${jobs[@]}"
if [ -n "$fetching" ] && ! wait "$fetching"; then
  cat "$fetchlog" >&2
  echo "build: fetching the Go modules failed" >&2
  exit 1
fi
