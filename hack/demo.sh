#!/usr/bin/env bash
# The main job against the simulated lab: bring a lab up, run mgmtctl in
# the lab's laptop namespace twice (the second run must say changed=0),
# and leave the lab up to explore. Needs root (network namespaces).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin="$here/bin"
dir=${LAB_DIR:-"$here/.lab"}
# Every phase by default; TAGS=vm,k3s runs some of them.
tags=${TAGS:-vm,k3s,addons,capi,kubeconfig,inspector}

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root: the lab is built from network namespaces" >&2
  exit 1
fi
# Upstream's cert-manager and operator build while the lab starts and the
# vm and k3s phases run: nothing runs them before the addons phase, and the
# lab's kubelet, like a kubelet pulling an image, retries a container
# whose binary is not there yet (ErrImagePull, every 10 s). A failed build
# stops the demo's run rather than leave it waiting out its bound.
blog=$(mktemp)
(
  t0=$SECONDS
  if ! bash "$here/hack/build.sh" upstream >"$blog" 2>&1; then
    cat "$blog" >&2
    echo "demo: building upstream's binaries failed; stopping mgmtctl" >&2
    pkill -TERM -f -- "$bin/mgmtctl .*-c $dir/mgmt.yaml" || true
    exit 1
  fi
  if [ $((SECONDS - t0)) -ge 5 ]; then
    echo "  (upstream's cert-manager and operator built beside the lab in $((SECONDS - t0)) s)"
  fi
  rm -f "$blog"
) &
upstream=$!
echo "bringing upstream's cert-manager and cluster-api-operator up to date beside the lab (built the first time in about 2 minutes):"
echo "  until they are there, the lab's kubelet reports their pods as an image still to pull"
"$bin/labsim" up --dir "$dir"
run() { echo "+ mgmtctl $*"; "$bin/labsim" exec --dir "$dir" -- "$bin/mgmtctl" "$@" -c "$dir/mgmt.yaml"; }

run plan --tags "$tags"
run apply --tags "$tags"
wait "$upstream"
echo
echo "Second run: nothing left to change."
run apply --tags "$tags"
echo
echo "Read-only health check:"
run status --tags "$tags"

kc="$dir/laptop/home/.kube/lab-mgmt.kubeconfig"
echo
echo "The operator's own log, as a user reads it (kubectl logs, through the API server and the lab's kubelet):"
echo "+ kubectl -n capi-operator-system logs deploy/cluster-api-operator --tail=6"
"$bin/labsim" exec --dir "$dir" -- "$bin/kubectl" --kubeconfig "$kc" -n capi-operator-system logs deploy/cluster-api-operator --tail=6 | cut -c1-200

cat <<MSG

The lab is still up in $dir:
  $bin/labsim status --dir $dir
  $bin/labsim exec --dir $dir -- $bin/kubectl --kubeconfig $dir/laptop/home/.kube/lab-mgmt.kubeconfig get nodes
  $bin/labsim exec --dir $dir -- $bin/kubectl --kubeconfig $dir/laptop/home/.kube/lab-mgmt.kubeconfig \\
      get coreproviders,bootstrapproviders,controlplaneproviders,infrastructureproviders,ipamproviders -A
  $bin/labsim exec --dir $dir -- $bin/kubectl --kubeconfig $dir/laptop/home/.kube/lab-mgmt-ro.kubeconfig auth can-i get secrets
  make build   # adds upstream's clusterctl (and what only the tests run) beside the demo's binaries, then:
  $bin/labsim exec --dir $dir -- env GOPROXY=off KUBECONFIG=$dir/laptop/home/.kube/lab-mgmt.kubeconfig $bin/clusterctl \
      generate cluster lab1 --infrastructure proxmox:v0.9.1 --kubernetes-version v1.35.9 \
      --control-plane-machine-count 1 --worker-machine-count 1 --list-variables
  $bin/labsim exec --dir $dir -- $bin/kubectl --kubeconfig $dir/laptop/home/.kube/lab-mgmt.kubeconfig \
      -n capi-operator-system logs deploy/cluster-api-operator   # the operator's own log
  $bin/labsim exec --dir $dir -- ssh root@192.0.2.10 qm config 110
  $bin/labsim exec --dir $dir -- ssh -o UserKnownHostsFile=$dir/laptop/home/.config/mgmtctl/known_hosts ubuntu@192.0.2.50
Tear it down with: $bin/labsim down --dir $dir
MSG
