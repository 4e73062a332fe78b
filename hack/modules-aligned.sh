#!/usr/bin/env bash
# Fails when the tool's, the lab's and cert-manager's builds use a module
# at different versions. The Go build cache keys a compiled package by its
# sources and its dependencies': client-go and the rest of Kubernetes'
# libraries are compiled once for mgmtctl, the lab and cert-manager only
# when every module under them is at one version in the three builds. One
# golang.org/x/net apart compiled them three times: a first build of the
# demo took 642 s, and 454 s once aligned (docs/testing.md).
#
# lab/upstream (the operator and clusterctl) is left out: upstream's
# operator pins Kubernetes 0.34 and controller-runtime 0.22, which the
# rest cannot follow.
#
# To align after a bump: raise the lower version in each go.mod to the
# highest (go get module@version in each module), then go mod tidy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
# Modules that may differ, with why: no package the builds share imports
# them.
declare -A may_differ=(
  # Helm v3.18's pkg/provenance imports x/crypto/openpgp, which x/crypto
  # v0.59 no longer has; the lab stays at v0.58, the tool takes the newest.
  # Only mgmtctl's own SSH code and the lab's import x/crypto.
  [golang.org/x/crypto]=1
)
f='{{with .Module}}{{.Path}} {{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}{{end}}'
list() { (cd "$root/$1" && "$GO" list -deps -f "$f" "${@:2}") | grep -v ' $' | sort -u | sed "s|^|$1 |"; }
all=$( { list . ./cmd/mgmtctl; list lab ./cmd/labsim ./cmd/k3s ./cmd/kubectl helm.sh/helm/v3/cmd/helm; list lab/certmanager .; } )
bad=0
while read -r mod; do
  [ -n "${may_differ[$mod]:-}" ] && continue
  echo "modules: $mod is at different versions:" $(awk -v m="$mod" '$2==m {print $1"="$3}' <<<"$all") >&2
  bad=1
done < <(awk '{print $2, $3}' <<<"$all" | sort -u | awk '{print $1}' | uniq -d)
exit $bad
