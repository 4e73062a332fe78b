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
"$bin/labsim" up --dir "$dir"
run() { echo "+ mgmtctl $*"; "$bin/labsim" exec --dir "$dir" -- "$bin/mgmtctl" "$@" -c "$dir/mgmt.yaml"; }

run plan --tags "$tags"
run apply --tags "$tags"
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
