#!/usr/bin/env bash
# The main job. Until the simulated lab lands (issue 3), it shows the part of
# mgmtctl that runs without one: init, validate and the config errors.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mgmtctl="$here/bin/mgmtctl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HOME="$work/home"
mkdir -p "$HOME/.ssh"
ssh-keygen -q -t ed25519 -N '' -f "$HOME/.ssh/id_ed25519"
cd "$work"
echo "+ mgmtctl init";      "$mgmtctl" init
echo "+ mgmtctl validate";  "$mgmtctl" validate
sed -i 's/id: 110 /id: 7 /; s/^    # vlan: 4 .*/    vlan: 5000/' mgmt.yaml
echo "+ mgmtctl validate   (after breaking two fields)"
"$mgmtctl" validate 2>&1 || echo "exit code $?"
echo
echo "The simulated lab (labsim) that 'mgmtctl apply' runs against is issue 3; see README."
