#!/usr/bin/env bash
# Installs the Debian packages the tests and the lab need, when missing:
# OpenSSH server and client (real SSH everywhere), sudo (becoming root on the
# VM), iproute2 and util-linux (the lab's namespaces, unshare, nsenter,
# flock, setsid), nftables (the pod network's masquerading), arping (a booting VM announces its address), curl and
# ca-certificates (downloads on the simulated hosts), procps, patch (diff
# tests apply their output), make.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs="iputils-arping nftables openssh-server openssh-client sudo iproute2 util-linux procps patch make curl ca-certificates passwd openssl"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing packages:$missing (run as root to install them)" >&2
    exit 1
  fi
  # Quiet unless it fails: the first thing a user reads should be
  # mgmtctl, not dpkg's triggers and sshd's key generation.
  log=$(mktemp)
  echo "installing:$missing"
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "install-deps: apt-get failed (output above)" >&2
    exit 1
  fi
  rm -f "$log"
fi
