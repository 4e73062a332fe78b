#!/usr/bin/env bash
# Builds mgmtctl, the lab and upstream's controllers into bin/, one line per
# step. The Go toolchain's own output (module downloads, compiler messages)
# is kept in a log and shown only when a step fails: the first screen of a
# cold `make demo` should be the project's, not `go: downloading` by the
# hundred.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
bin="$root/bin"
mkdir -p "$bin"
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

# Versions are go.mod's: the operator and clusterctl are stamped with the
# module versions they are built from, as upstream's release builds are.
operator=$(cd "$root/lab/upstream" && "$GO" list -m -f '{{.Version}}' sigs.k8s.io/cluster-api-operator)
clusterctl=$(cd "$root/lab/upstream" && "$GO" list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)
certmanager=$(cd "$root/lab/certmanager" && "$GO" list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
kube="-X k8s.io/component-base/version.gitVersion=v1.36.3 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36"

echo "building mgmtctl"
quiet "$root" "$GO" build -o "$bin/mgmtctl" ./cmd/mgmtctl
echo "building the lab's Kubernetes (k3s with its kube-apiserver, kubectl, labsim): first run only, about 4 minutes on 2 cores"
quiet "$root/lab" "$GO" build -o "$bin/labsim" ./cmd/labsim
quiet "$root/lab" "$GO" build -ldflags "$kube" -o "$bin/k3s" ./cmd/k3s
quiet "$root/lab" "$GO" build -ldflags "$kube" -o "$bin/kubectl" ./cmd/kubectl
echo "building upstream's cluster-api-operator $operator and clusterctl $clusterctl: first run only, about 3 minutes on 2 cores"
quiet "$root/lab/upstream" "$GO" build -ldflags "-X sigs.k8s.io/cluster-api-operator/version.gitVersion=$operator" \
  -o "$bin/cluster-api-operator-$operator" sigs.k8s.io/cluster-api-operator/cmd
quiet "$root/lab/upstream" "$GO" build -ldflags "-X sigs.k8s.io/cluster-api/version.gitVersion=$clusterctl" \
  -o "$bin/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
# cert-manager at each version the lab's chart repository serves: go.mod's,
# and the older ones through their own modfile (lab/certmanager/<v>.mod).
# One binary per version, named per component by links (the kubelet runs
# bin/cert-manager-<component>-<version>).
echo "building upstream's cert-manager $certmanager and older (controller, webhook, cainjector, startupapicheck in one binary): first run only, about 4 minutes on 2 cores"
for v in "$certmanager" $(cd "$root/lab/certmanager" && ls v*.mod 2>/dev/null | sed 's/\.mod$//'); do
  modfile=()
  [ "$v" = "$certmanager" ] || modfile=("-modfile=$v.mod")
  quiet "$root/lab/certmanager" "$GO" build "${modfile[@]}" -ldflags "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$v" \
    -o "$bin/cert-manager-$v" .
  for c in controller webhook cainjector startupapicheck; do
    ln -sfn "cert-manager-$v" "$bin/cert-manager-$c-$v"
  done
done
