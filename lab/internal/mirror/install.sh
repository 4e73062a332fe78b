#!/bin/sh
# The lab's copy of https://get.k3s.io: the subset of k3s's install.sh that
# a server install on a systemd host exercises, with upstream's variables,
# messages, files and change detection (k3s-io/k3s install.sh;
# docs/upstream.md §2.1).
set -e

info() { echo '[INFO] ' "$@"; }
warn() { echo '[WARN] ' "$@" >&2; }
fatal() { echo '[ERROR] ' "$@" >&2; exit 1; }

GITHUB_URL=${GITHUB_URL:-https://github.com/k3s-io/k3s/releases}
INSTALL_K3S_CHANNEL_URL=${INSTALL_K3S_CHANNEL_URL:-'https://update.k3s.io/v1-release/channels'}
INSTALL_K3S_CHANNEL=${INSTALL_K3S_CHANNEL:-'stable'}
BIN_DIR=${INSTALL_K3S_BIN_DIR:-/usr/local/bin}
SYSTEMD_DIR=${INSTALL_K3S_SYSTEMD_DIR:-/etc/systemd/system}
SERVICE_K3S=k3s.service
FILE_K3S_SERVICE=${SYSTEMD_DIR}/${SERVICE_K3S}
FILE_K3S_ENV=${SYSTEMD_DIR}/${SERVICE_K3S}.env

if [ "$(id -u)" -ne 0 ]; then
    fatal "You need to be root to perform this install"
fi

# --- command and args: INSTALL_K3S_EXEC or the script's arguments ---
if [ -z "${INSTALL_K3S_EXEC}" ] && [ $# -eq 0 ]; then
    CMD_K3S=server
else
    set -- ${INSTALL_K3S_EXEC} "$@"
    case "$1" in
        -*|"") CMD_K3S=server ;;
        *) CMD_K3S=$1; shift ;;
    esac
fi
if [ -n "${K3S_URL}" ] && [ "${CMD_K3S}" = server ] && [ -z "${INSTALL_K3S_EXEC}" ]; then
    CMD_K3S=agent
    if [ -z "${K3S_TOKEN}" ] && [ -z "${K3S_TOKEN_FILE}" ]; then
        fatal "Defaulted k3s exec command to 'agent' because K3S_URL is defined, but K3S_TOKEN or K3S_TOKEN_FILE is not defined."
    fi
fi

download() {
    curl -fsSL -o "$1" "$2" || fatal 'Download failed'
}

get_release_version() {
    if [ -n "${INSTALL_K3S_VERSION}" ]; then
        VERSION_K3S=${INSTALL_K3S_VERSION}
    else
        info "Finding release for channel ${INSTALL_K3S_CHANNEL}"
        version_url="${INSTALL_K3S_CHANNEL_URL}/${INSTALL_K3S_CHANNEL}"
        VERSION_K3S=$(curl -w '%{url_effective}' -L -s -S "${version_url}" -o /dev/null | sed -e 's|.*/||')
    fi
    info "Using ${VERSION_K3S} as release"
}

hashes() {
    for f in "${BIN_DIR}/k3s" "${FILE_K3S_SERVICE}" "${FILE_K3S_ENV}"; do
        [ -f "$f" ] && sha256sum "$f" || echo "missing $f"
    done
}

PRE_INSTALL_HASHES=$(hashes)

if [ "${INSTALL_K3S_SKIP_DOWNLOAD}" = true ] || [ "${INSTALL_K3S_SKIP_DOWNLOAD}" = binary ]; then
    info 'Skipping k3s download and verify'
    [ -x "${BIN_DIR}/k3s" ] || fatal "Executable k3s binary not found at ${BIN_DIR}/k3s"
else
    get_release_version
    TMP_DIR=$(mktemp -d -t k3s-install.XXXXXXXXXX)
    trap 'rm -rf "${TMP_DIR}"' EXIT
    HASH_URL=${GITHUB_URL}/download/${VERSION_K3S}/sha256sum-amd64.txt
    info "Downloading hash ${HASH_URL}"
    download "${TMP_DIR}/k3s.hash" "${HASH_URL}"
    HASH_EXPECTED=$(grep " k3s$" "${TMP_DIR}/k3s.hash" | cut -d' ' -f1)
    if [ -x "${BIN_DIR}/k3s" ] && [ "$(sha256sum "${BIN_DIR}/k3s" | cut -d' ' -f1)" = "${HASH_EXPECTED}" ]; then
        info 'Skipping binary downloaded, installed k3s matches hash'
    else
        BIN_URL=${GITHUB_URL}/download/${VERSION_K3S}/k3s
        info "Downloading binary ${BIN_URL}"
        download "${TMP_DIR}/k3s.bin" "${BIN_URL}"
        info 'Verifying binary download'
        HASH_BIN=$(sha256sum "${TMP_DIR}/k3s.bin" | cut -d' ' -f1)
        if [ "${HASH_EXPECTED}" != "${HASH_BIN}" ]; then
            fatal "Download sha256 does not match ${HASH_EXPECTED}, got ${HASH_BIN}"
        fi
        info "Installing k3s to ${BIN_DIR}/k3s"
        chmod 755 "${TMP_DIR}/k3s.bin"
        mv -f "${TMP_DIR}/k3s.bin" "${BIN_DIR}/k3s"
    fi
fi

info 'Skipping installation of SELinux RPM'
for cmd in kubectl crictl ctr; do
    if [ ! -e "${BIN_DIR}/${cmd}" ]; then
        which_cmd=$(command -v ${cmd} 2>/dev/null || true)
        if [ -z "${which_cmd}" ] || [ "${INSTALL_K3S_SYMLINK}" = force ]; then
            info "Creating ${BIN_DIR}/${cmd} symlink to k3s"
            ln -sf k3s "${BIN_DIR}/${cmd}"
        else
            info "Skipping ${BIN_DIR}/${cmd} symlink to k3s, command exists in PATH at ${which_cmd}"
        fi
    else
        info "Skipping ${BIN_DIR}/${cmd} symlink to k3s, already exists"
    fi
done

info "Creating killall script ${BIN_DIR}/k3s-killall.sh"
printf '#!/bin/sh\nsystemctl stop k3s\n' > "${BIN_DIR}/k3s-killall.sh"
chmod 755 "${BIN_DIR}/k3s-killall.sh"
info "Creating uninstall script ${BIN_DIR}/k3s-uninstall.sh"
printf '#!/bin/sh\n%s/k3s-killall.sh\nsystemctl disable k3s\nrm -f %s %s %s/k3s\n' "${BIN_DIR}" "${FILE_K3S_SERVICE}" "${FILE_K3S_ENV}" "${BIN_DIR}" > "${BIN_DIR}/k3s-uninstall.sh"
chmod 755 "${BIN_DIR}/k3s-uninstall.sh"

info "env: Creating environment file ${FILE_K3S_ENV}"
mkdir -p "${SYSTEMD_DIR}"
umask 077
env | grep -E -i '^(K3S|CONTAINERD)_' | sort > "${FILE_K3S_ENV}" || true
env | grep -E -i '^(NO|HTTP|HTTPS)_PROXY' | sort >> "${FILE_K3S_ENV}" || true
umask 022

info "systemd: Creating service file ${FILE_K3S_SERVICE}"
{
    printf '[Unit]\nDescription=Lightweight Kubernetes\nDocumentation=https://k3s.io\nWants=network-online.target\nAfter=network-online.target\n\n'
    printf '[Install]\nWantedBy=multi-user.target\n\n'
    printf '[Service]\nType=notify\nEnvironmentFile=-/etc/default/%%N\nEnvironmentFile=-/etc/sysconfig/%%N\nEnvironmentFile=-%s\n' "${FILE_K3S_ENV}"
    printf 'KillMode=process\nDelegate=yes\nUser=root\nLimitNOFILE=1048576\nLimitNPROC=infinity\nLimitCORE=infinity\nTasksMax=infinity\nTimeoutStartSec=0\nRestart=always\nRestartSec=5s\n'
    printf 'ExecStartPre=-/sbin/modprobe br_netfilter\nExecStartPre=-/sbin/modprobe overlay\n'
    printf 'ExecStart=%s/k3s \\\n    %s \\\n' "${BIN_DIR}" "${CMD_K3S}"
    for arg in "$@"; do
        printf "\t'%s' \\\\\n" "${arg}"
    done
    printf '\n'
} > "${FILE_K3S_SERVICE}"

if [ "${INSTALL_K3S_SKIP_ENABLE}" = true ]; then
    exit 0
fi
info "systemd: Enabling k3s unit"
systemctl enable "${FILE_K3S_SERVICE}" >/dev/null 2>&1
systemctl daemon-reload >/dev/null

POST_INSTALL_HASHES=$(hashes)
if [ "${PRE_INSTALL_HASHES}" = "${POST_INSTALL_HASHES}" ] && [ "${INSTALL_K3S_FORCE_RESTART}" != true ]; then
    info 'No change detected so skipping service start'
    exit 0
fi
if [ "${INSTALL_K3S_SKIP_START}" = true ]; then
    exit 0
fi
info "systemd: Starting k3s"
systemctl restart k3s
